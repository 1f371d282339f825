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


#: rows as SkyPilot's catalogs/v7/aws/vms.csv writes them (copied from the file at 27f67dd4;
#: v8 has the same columns and an Arch one):
#: one per availability zone, the GPU described by a Python-literal GpuInfo
SKYPILOT_HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
    "Region,AvailabilityZone\n"
)


def gpu_info(name: str, maker: str, count: int, mib: int) -> str:
    return (
        f"\"{{'Gpus': [{{'Name': '{name}', 'Manufacturer': '{maker}', 'Count': {count}, "
        f"'MemoryInfo': {{'SizeInMiB': {mib}}}}}], 'TotalGpuMemoryInMiB': {count * mib}}}\""
    )


SKYPILOT_ROWS = [
    "a1.large,,,2.0,4.0,,0.051,0.051000,us-east-1,use1-az2",
    f"g4ad.xlarge,Radeon Pro V520,1.0,4.0,16.0,{gpu_info('Radeon Pro V520', 'AMD', 1, 8192)},"
    "0.37853,0.144500,us-east-1,use1-az1",
    f"g5.xlarge,A10G,1.0,4.0,16.0,{gpu_info('A10G', 'NVIDIA', 1, 22888)},1.006,0.412100,"
    "us-east-1,use1-az1",
    f"g5.xlarge,A10G,1.0,4.0,16.0,{gpu_info('A10G', 'NVIDIA', 1, 22888)},1.006,0.398900,"
    "us-east-1,use1-az2",
    f"g5.xlarge,A10G,1.0,4.0,16.0,{gpu_info('A10G', 'NVIDIA', 1, 22888)},1.459,0.705200,"
    "ap-northeast-1,apne1-az1",
    f"g5g.xlarge,T4g,1.0,4.0,8.0,{gpu_info('T4g', 'NVIDIA', 1, 16384)},0.42,0.148500,"
    "us-east-1,use1-az1",
    f"p4de.24xlarge,A100-80GB,8.0,96.0,1152.0,{gpu_info('A100-80GB', 'NVIDIA', 8, 81920)},"
    "40.96575,,us-east-1,use1-az1",
    f"p5e.48xlarge,H200,8.0,192.0,2048.0,{gpu_info('H200', 'NVIDIA', 8, 144384)},,13.440700,"
    "us-east-2,use2-az1",
    f"p5en.48xlarge,H200,8.0,192.0,2048.0,{gpu_info('H200', 'NVIDIA', 8, 144384)},84.8,"
    "19.548900,us-east-1,use1-az2",
    f"g7e.2xlarge,RTX PRO Server 6000,1.0,8.0,64.0,"
    f"{gpu_info('RTX PRO Server 6000', 'NVIDIA', 1, 98304)},3.36312,1.436000,us-east-2,use2-az1",
]


def test_the_catalog_is_built_from_the_skypilot_catalog_with_its_source_named(tmp_path, capsys):
    (tmp_path / "aws-ec2-2025-05-01.json").write_text(json.dumps(OLD))
    csv_path = tmp_path / "vms.csv"
    csv_path.write_text(SKYPILOT_HEADER + "\n".join(SKYPILOT_ROWS) + "\n")
    args = ["--out", str(tmp_path), "--skypilot-csv", str(csv_path), "--date", "2026-11-28"]
    assert load_script().main([*args, "--source-commit", "27f67dd4"]) == 0
    out = capsys.readouterr().out
    new = read_catalog(catalog_files("aws", "ec2", tmp_path)[-1])
    assert new.date == "2026-11-28"
    assert "skypilot-catalog catalogs/v8/aws/vms.csv at 27f67dd4" in new.source
    assert [e.instance_type for e in new.entries] == [
        "g5.xlarge",
        "g7e.2xlarge",
        "p4de.24xlarge",
        "p5en.48xlarge",
    ]
    g5 = new.entry("g5.xlarge")
    assert g5 is not None and g5.prices == {"ap-northeast-1": 1.459, "us-east-1": 1.006}
    assert (g5.gpu_type, g5.gpu_count, g5.gpu_memory_gb, g5.vcpus) == ("A10G", 1, 22.4, 4.0)
    p4de = new.entry("p4de.24xlarge")
    assert p4de is not None and (p4de.gpu_type, p4de.gpu_memory_gb) == ("A100", 80.0)
    g7e = new.entry("g7e.2xlarge")  # AWS's GPU name becomes the one jobs ask for
    assert g7e is not None and (g7e.gpu_type, g7e.gpu_memory_gb) == ("RTXPRO6000", 96.0)
    assert "g4ad.xlarge: left out: not an NVIDIA GPU" in out
    assert "g5g.xlarge: left out: an arm64 instance" in out
    assert "p5e.48xlarge: left out: no on-demand price" in out
    assert "+ p5en.48xlarge (H200 x8)" in out and "- g3.4xlarge" in out


def test_a_broken_skypilot_csv_is_one_line_naming_it(tmp_path, capsys):
    bad = tmp_path / "vms.csv"
    bad.write_text("InstanceType,Region\ng5.xlarge,us-east-1\n")
    code = load_script().main(["--out", str(tmp_path), "--skypilot-csv", str(bad), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(
        f"aws_price_catalog: {bad}: ValueError: not a SkyPilot vms.csv: no column AcceleratorName"
    )
    assert len(err.strip().splitlines()) == 1
