"""``corral offers`` on AWS (moto, and the Price List API's loopback fake): every offer says
where its price came from and when, in the table and in ``--json``; a region or GPU type AWS
has no price for is one line naming it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from corral.cli.app import app

runner = CliRunner()


@pytest.fixture
def aws_env(aws, price_list, owner, monkeypatch):
    for name, value in {
        **aws.env(),
        "AWS_ENDPOINT_URL_PRICING": price_list.url,  # boto3's own per-service endpoint
        "CORRAL_PROVIDERS": "aws",
        "CORRAL_AWS_REGIONS": "us-east-1",
        "CORRAL_AWS_OWNER": owner,
        "CORRAL_AWS_IMAGE_ID": aws.image_id(),
        "COLUMNS": "250",  # the table on one line per offer
    }.items():
        monkeypatch.setenv(name, value)


def offers(*args: str):
    result = runner.invoke(app, ["offers", "--provider", "aws", *args])
    return result.exit_code, result.stdout, result.stderr


def test_offers_say_where_each_price_came_from_and_when(aws_env):
    code, out, err = offers("--gpus", "A10G:1", "--json")
    assert code == 0, err
    rows = json.loads(out)["offers"]
    on_demand = [o for o in rows if not o["spot"]]
    spot = [o for o in rows if o["spot"]]
    assert on_demand and spot
    assert {o["details"]["price_source"] for o in on_demand} == {"AWS Price List API"}
    assert {o["details"]["price_source"] for o in spot} == {"describe_spot_price_history"}
    for o in rows:
        assert o["catalog_date"] == o["details"]["price_at"] and "T" in o["catalog_date"]
    code, out, err = offers("--gpus", "A10G:1", "--on-demand")
    assert code == 0, err
    assert "SOURCE" in out and "AWS Price List API" in out


def test_a_region_or_gpu_type_aws_does_not_price_is_one_line_naming_it(aws_env):
    _, out, _ = offers("--gpus", "H300:1")
    assert "aws has no instance type with 'H300' GPUs" in out
    line = next(s for s in out.splitlines() if "H300" in s)
    assert "A10G" in line  # the known ones, on the same line
    _, out, _ = offers("--gpus", "A10G:1", "--region", "mars-north-1")
    assert "aws has no region 'mars-north-1'" in out
