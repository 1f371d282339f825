"""``scripts/aws_price_catalog.py`` regenerates the AWS on-demand catalog from the Price List
API: boto3's ``pricing`` client against a loopback fake of that API (all pages, the filters
of an on-demand Linux price), a catalog corral loads, what changed, and types left out."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import boto3
import pytest

from corral.pricing.catalog import Catalog, catalog_files, read_catalog

from .fake_price_list import FakePriceList, product

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "aws_price_catalog.py"
OLD = {
    "kind": "catalog",
    "provider": "aws",
    "service": "ec2",
    "date": "2025-05-01",
    "entries": [
        {
            "instance_type": "p4d.24xlarge",
            "gpu_type": "A100",
            "gpu_count": 8,
            "vcpus": 96,
            "memory_gb": 1152,
            "prices": {"us-east-1": 32.7726, "us-west-2": 32.7726},
        },
        {
            "instance_type": "g3.4xlarge",
            "gpu_type": "M60",
            "gpu_count": 1,
            "vcpus": 16,
            "memory_gb": 122,
            "prices": {"us-east-1": 1.14},
        },
    ],
}


def load_script():
    spec = importlib.util.spec_from_file_location("aws_price_catalog", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def price_list(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    h100 = dict(vcpu=192, memory="2048 GiB", gpu="8", gpu_memory="640 GiB")
    fake = FakePriceList(
        [
            product(
                "p4d.24xlarge",
                "us-east-1",
                21.9576,
                vcpu=96,
                memory="1152 GiB",
                gpu="8",
                gpu_memory="320 GiB",
            ),
            product(
                "p4d.24xlarge",
                "us-west-2",
                21.9576,
                vcpu=96,
                memory="1152 GiB",
                gpu="8",
                gpu_memory="320 GiB",
            ),
            product("p4d.24xlarge", "eu-west-1", 23.0, vcpu=96, memory="1152 GiB", gpu="8"),
            product(
                "p4d.24xlarge",
                "us-east-1",
                40.0,
                vcpu=96,
                memory="1152 GiB",
                gpu="8",
                os_="Windows",
            ),  # not Linux: filtered out by the request
            product(
                "p4d.24xlarge",
                "us-east-1",
                1.0,
                vcpu=96,
                memory="1152 GiB",
                gpu="8",
                capacity="UnusedCapacityReservation",
            ),
            product("p5e.48xlarge", "us-east-1", None, **h100),  # capacity blocks only
            product("p5en.48xlarge", "us-east-1", 63.296, **h100),
            product("p5en.48xlarge", "us-west-2", 63.296, **h100),
            product(
                "g6f.large",
                "us-east-1",
                0.2,
                vcpu=2,
                memory="8 GiB",
                gpu="0.125",
                gpu_memory="3 GiB",
            ),
        ]
    )
    yield fake
    fake.close()


def test_the_catalog_is_regenerated_from_every_page_of_the_price_list(price_list, tmp_path, capsys):
    (tmp_path / "aws-ec2-2025-05-01.json").write_text(json.dumps(OLD))
    script = load_script()
    code = script.main(
        [
            "--out",
            str(tmp_path),
            "--endpoint-url",
            price_list.url,
            "--date",
            "2025-07-01",
            "--types",
            "p4d.24xlarge,p5e.48xlarge,p5en.48xlarge,g6f.large,g3.4xlarge",
            "--regions",
            "us-east-1,us-west-2",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    written = catalog_files("aws", "ec2", tmp_path)
    assert [p.name for p in written] == ["aws-ec2-2025-05-01.json", "aws-ec2-2025-07-01.json"]
    new = read_catalog(written[-1])
    assert isinstance(new, Catalog) and new.date == "2025-07-01"
    p4d = new.entry("p4d.24xlarge")
    assert p4d is not None
    assert p4d.prices == {"us-east-1": 21.9576, "us-west-2": 21.9576}  # Linux, used, asked
    assert (p4d.gpu_type, p4d.gpu_count, p4d.gpu_memory_gb, p4d.vcpus, p4d.memory_gb) == (
        "A100",
        8,
        40.0,
        96.0,
        1152.0,
    )
    p5en = new.entry("p5en.48xlarge")
    assert p5en is not None and (p5en.gpu_type, p5en.gpu_memory_gb) == ("H200", 80.0)
    assert new.entry("p5e.48xlarge") is None and new.entry("g6f.large") is None
    assert "p5e.48xlarge: left out: no on-demand Linux price" in out
    assert "g6f.large: left out: a fractional GPU (0.125)" in out
    assert "g3.4xlarge: left out: no on-demand Linux price" in out
    assert "~ p4d.24xlarge us-east-1: 32.7726 -> 21.9576" in out
    assert "+ p5en.48xlarge (H200 x8)" in out and "- g3.4xlarge" in out
    asked = [r for r in price_list.requests if r["Filters"][0]["Value"] == "p4d.24xlarge"]
    assert len(asked) == 2 and asked[1]["NextToken"] == "2"  # 3 match, 2 a page: both read
    filters = {f["Field"]: f["Value"] for f in asked[0]["Filters"]}
    assert filters["operatingSystem"] == "Linux" and filters["capacitystatus"] == "Used"
    assert asked[0]["ServiceCode"] == "AmazonEC2"


def test_dry_run_writes_nothing_and_api_errors_are_one_line(price_list, tmp_path, capsys):
    (tmp_path / "aws-ec2-2025-05-01.json").write_text(json.dumps(OLD))
    script = load_script()
    args = ["--out", str(tmp_path), "--endpoint-url", price_list.url, "--types", "p4d.24xlarge"]
    assert script.main([*args, "--dry-run"]) == 0
    assert "not written (--dry-run)" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["aws-ec2-2025-05-01.json"]
    client = boto3.client("pricing", region_name="us-east-1", endpoint_url=price_list.url)
    price_list.answer = lambda target, body: (  # type: ignore[method-assign]
        400,
        {"__type": "AccessDeniedException", "message": "not allowed"},
    )
    assert script.main(args, client=client) == 1
    err = capsys.readouterr().err
    assert err.startswith("aws_price_catalog: ") and "AccessDenied" in err
    assert len(err.strip().splitlines()) == 1
