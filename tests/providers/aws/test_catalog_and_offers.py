"""The bundled EC2 price catalog and the offers built from it with live spot prices."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from corral.errors import InfeasibleRequest, ProviderUnavailable
from corral.pricing import CatalogError, catalog_files, load_catalog, read_catalog
from corral.pricing.catalog import Catalog
from corral.providers.aws.offers import (
    SpotPriceCache,
    build_offers,
    fetch_spot_prices,
    offer_id,
    parse_offer_id,
)
from corral.providers.base import Requirements

CATALOG = load_catalog("aws", "ec2")


def test_bundled_catalog_is_dated_and_covers_the_gpu_families() -> None:
    assert CATALOG.kind == "catalog" and CATALOG.provider == "aws"
    datetime.strptime(CATALOG.date, "%Y-%m-%d")
    families = {e.instance_type.split(".")[0] for e in CATALOG.entries}
    assert {
        "g4dn", "g5", "g6", "g6e", "g6f", "g7e", "gr6", "p3", "p4d", "p4de", "p5", "p5en",
        "p6-b200", "p6-b300",
    } <= families  # fmt: skip
    assert "catalogs/v8/aws/vms.csv at 00148f2af367" in CATALOG.source
    for entry in CATALOG.entries:
        assert (entry.gpu_count >= 1) != bool(entry.gpu_fraction), entry.instance_type
        assert entry.gpu_type and entry.gpu_memory_gb
        assert entry.vcpus > 0 and entry.memory_gb > 0
        assert entry.prices and all(p > 0 for p in entry.prices.values()), entry.instance_type
    assert CATALOG.entry("p4d.24xlarge").gpu_type == "A100"
    p4de = CATALOG.entry("p4de.24xlarge")
    assert (p4de.gpu_type, p4de.gpu_count, p4de.gpu_memory_gb) == ("A100", 8, 80.0)
    p5en = CATALOG.entry("p5en.48xlarge")
    assert (p5en.gpu_type, p5en.gpu_memory_gb, p5en.prices["us-east-1"]) == ("H200", 141.0, 63.296)
    # the list prices after AWS's June 2025 cuts to P4d/P5 (before: 32.7726 and 98.32)
    assert CATALOG.entry("p4d.24xlarge").prices["us-east-1"] == 21.957642
    assert CATALOG.entry("p5.48xlarge").prices["us-east-1"] == 55.04
    assert CATALOG.entry("p5.48xlarge").gpu_count == 8
    assert CATALOG.entry("p5.4xlarge").gpu_count == 1
    assert CATALOG.entry("g6e.xlarge").gpu_type == "L40S"
    assert CATALOG.entry("g7e.2xlarge").gpu_type == "RTXPRO6000"
    assert CATALOG.entry("g6f.large").gpu_fraction == 0.125
    assert CATALOG.entry("p5e.48xlarge") is None  # capacity blocks only: no on-demand price
    assert len(CATALOG.regions()) >= 20  # every region the source prices, none estimated


def test_bundled_catalog_is_what_the_script_builds_from_the_kept_excerpt(tmp_path: Path) -> None:
    """Verifiable: the bundled file is exactly the script's output from the excerpt of the
    SkyPilot catalog kept in the repository (scripts/data), with the note naming its version."""
    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("apc", root / "scripts" / "aws_price_catalog.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    data = root / "scripts" / "data"
    note = (data / "skypilot-catalog-v8-aws-vms-gpu.note").read_text()
    args = ["--skypilot-csv", str(data / "skypilot-catalog-v8-aws-vms-gpu.csv")]
    args += ["--source-commit", "00148f2af367", "--source-note", note, "--read-on", "2026-11-29"]
    assert script.main([*args, "--date", CATALOG.date, "--out", str(tmp_path)]) == 0
    built = json.loads((tmp_path / f"aws-ec2-{CATALOG.date}.json").read_text())
    assert Catalog.model_validate(built) == CATALOG


def test_newest_catalog_file_wins_and_a_bad_one_names_itself(tmp_path: Path) -> None:
    doc = json.loads(catalog_files("aws", "ec2")[-1].read_text())
    for date in ("2024-01-01", "2025-02-03"):
        (tmp_path / f"aws-ec2-{date}.json").write_text(json.dumps({**doc, "date": date}))
    (tmp_path / "aws-ec2-notes.json").write_text("{}")  # not a catalog name: ignored
    files = catalog_files("aws", "ec2", tmp_path)
    assert [f.name for f in files] == ["aws-ec2-2024-01-01.json", "aws-ec2-2025-02-03.json"]
    assert read_catalog(files[-1]).date == "2025-02-03"
    bad = tmp_path / "aws-ec2-2026-01-01.json"
    bad.write_text(json.dumps({**doc, "entries": [{**doc["entries"][0], "vcpus": -1}]}))
    with pytest.raises(CatalogError, match=r"aws-ec2-2026-01-01\.json: entries\.0\.vcpus"):
        read_catalog(bad)


def spot_table(region: str) -> tuple[dict, float]:
    prices = {
        "g5.xlarge": {f"{region}a": 0.45, f"{region}b": 0.39},
        "g5.2xlarge": {f"{region}a": 0.52},
    }
    return prices, 1_800_000_000.0


A10G_1 = Requirements(gpu_type="A10G", gpu_count_min=1, gpu_count_max=1)


def test_offers_are_cheapest_first_with_one_spot_offer_per_zone() -> None:
    offers = build_offers("aws", CATALOG, A10G_1, ["us-east-1"], spot_table)
    prices = [o.price_per_hour for o in offers]
    assert prices == sorted(prices)
    first = offers[0]
    assert first.offer_id == "us-east-1b:g5.xlarge:spot" and first.spot
    assert first.price_per_hour == 0.39 and first.region == "us-east-1"
    assert first.details["zone"] == "us-east-1b"
    assert first.details["machine"] == "us-east-1b:g5.xlarge"
    assert first.details["on_demand_price"] == CATALOG.entry("g5.xlarge").prices["us-east-1"]
    assert first.catalog_date == "2027-01-15T08:00:00+00:00"  # when the spot price was read
    assert first.details["price_source"] == "describe_spot_price_history"
    assert first.details["price_at"] == first.catalog_date
    on_demand = [o for o in offers if not o.spot]
    assert {o.details["instance_type"] for o in on_demand} == {
        e.instance_type for e in CATALOG.entries if e.gpu_type == "A10G" and e.gpu_count == 1
    }
    assert all(o.gpu_type == "A10G" and o.gpu_count == 1 for o in offers)
    assert parse_offer_id(first.offer_id) == ("us-east-1b", "g5.xlarge", True)
    assert parse_offer_id(offer_id("eu-west-1", "p5.48xlarge", False)) == (
        "eu-west-1",
        "p5.48xlarge",
        False,
    )
    assert parse_offer_id("fake:thing") is None


def test_offers_honour_spot_price_region_and_hardware_limits() -> None:
    req = Requirements(gpu_type="H100", gpu_count_min=8, gpu_count_max=8, spot=False)
    offers = build_offers("aws", CATALOG, req, ["us-east-1", "eu-west-1"], spot_table)
    assert [o.offer_id for o in offers] == ["us-east-1:p5.48xlarge:on-demand"]  # no p5 in eu-west-1
    details = offers[0].details  # a catalog price says which catalog, from which source
    assert details["price_source"] == f"catalog {CATALOG.date}"
    assert "catalogs/v8/aws/vms.csv at 00148f2af367" in details["catalog_source"]
    assert offers[0].price_per_hour == 55.04
    cheap = A10G_1.model_copy(update={"max_hourly_price": 1.1, "disk_gb": 300.0})
    offers = build_offers("aws", CATALOG, cheap, ["us-east-1"], spot_table)
    assert offers and all(o.price_per_hour <= 1.1 for o in offers)
    assert all(o.details["disk_gb"] == 300.0 for o in offers)
    big = Requirements(gpu_type="A10G", gpu_count_min=1, gpu_count_max=8, cpus=96, memory_gb=300)
    types = {
        o.details["instance_type"]
        for o in build_offers("aws", CATALOG, big, ["us-east-1"], spot_table)
    }
    assert types == {"g5.24xlarge", "g5.48xlarge"}


def test_a_job_no_instance_type_fits_is_infeasible() -> None:
    with pytest.raises(InfeasibleRequest, match="aws has no instance type"):
        build_offers(
            "aws",
            CATALOG,
            Requirements(gpu_type="H100", gpu_count_min=16, gpu_count_max=16),
            ["us-east-1"],
            spot_table,
        )


def test_spot_price_failure_leaves_on_demand_offers_unless_spot_is_required() -> None:
    def broken(region: str) -> tuple[dict, float]:
        raise ProviderUnavailable(f"aws describe_spot_price_history in {region}: down")

    noted: list[str] = []
    offers = build_offers(
        "aws", CATALOG, A10G_1, ["us-east-1"], broken, lambda r, e: noted.append(r)
    )
    assert offers and not any(o.spot for o in offers) and noted == ["us-east-1"]
    with pytest.raises(ProviderUnavailable, match="down"):
        build_offers(
            "aws", CATALOG, A10G_1.model_copy(update={"spot": True}), ["us-east-1"], broken
        )


class FakeEc2:
    """Answers describe_spot_price_history pages; counts calls."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows, self.calls = rows, 0

    def pages(self, region: str, op: str, key: str, **kw: object):
        assert op == "describe_spot_price_history" and key == "SpotPriceHistory"
        assert kw["ProductDescriptions"] == ["Linux/UNIX"]
        self.calls += 1
        yield from self.rows


def row(itype: str, zone: str, price: str, day: int, desc: str = "Linux/UNIX") -> dict:
    return {
        "InstanceType": itype,
        "AvailabilityZone": zone,
        "SpotPrice": price,
        "ProductDescription": desc,
        "Timestamp": datetime(2026, 1, day, tzinfo=UTC),
    }


def test_spot_prices_keep_the_newest_linux_price_per_zone() -> None:
    ec2 = FakeEc2(
        [
            row("g5.xlarge", "us-east-1a", "0.50", 1),
            row("g5.xlarge", "us-east-1a", "0.41", 3),
            row("g5.xlarge", "us-east-1a", "0.44", 2),
            row("g5.xlarge", "us-east-1b", "0.47", 2, "Linux/UNIX (Amazon VPC)"),
            row("g5.xlarge", "us-east-1c", "0.10", 4, "Windows"),
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1d", "SpotPrice": "n/a"},
        ]
    )
    table = fetch_spot_prices(ec2, "us-east-1", ["g5.xlarge"], datetime.now(UTC))  # type: ignore[arg-type]
    assert table == {"g5.xlarge": {"us-east-1a": 0.41, "us-east-1b": 0.47}}


def test_spot_prices_are_cached_until_their_ttl_passes() -> None:
    now = [1000.0]
    ec2 = FakeEc2([row("g5.xlarge", "us-east-1a", "0.41", 3)])
    cache = SpotPriceCache(ec2, ["g5.xlarge"], ttl=300, clock=lambda: now[0])  # type: ignore[arg-type]
    assert cache.get("us-east-1") == ({"g5.xlarge": {"us-east-1a": 0.41}}, 1000.0)
    now[0] += 299
    cache.get("us-east-1")
    assert ec2.calls == 1
    now[0] += 2
    assert cache.get("us-east-1")[1] == 1301.0 and ec2.calls == 2
    cache.clear()
    cache.get("us-east-1")
    assert ec2.calls == 3


def test_a_share_of_a_gpu_is_listed_but_never_offered() -> None:
    catalog = CATALOG  # the bundled catalog lists g6f (1/8 to 1/2 of an L4) and gr6f
    assert catalog.entry("g6f.large").gpu_fraction == 0.125
    for req in (Requirements(), Requirements(gpu_type="L4", gpu_count_min=1)):
        offers = build_offers(
            "aws", catalog, req.model_copy(update={"spot": False}), ["us-east-1"], spot_table
        )
        assert "g6f.large" not in {o.details["instance_type"] for o in offers}


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("RTX PRO Server 6000", "RTXPRO6000"),  # AWS's name of the g7e GPU (DescribeInstanceTypes)
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTXPRO6000"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX6000ADA"),
        ("A100-80GB", "A100"),
        ("V100-32GB", "V100"),
    ],
)
def test_aws_gpu_names_get_the_names_jobs_use(name: str, canonical: str) -> None:
    from corral.providers.common.gpu_names import canonical_name

    assert canonical_name(name) == canonical
