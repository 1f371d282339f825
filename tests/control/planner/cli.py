"""The planner commands on a CLI of their own (the lead registers them in ``corral``), and a
fake cloud with a dated catalog for them to list."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import typer
from typer.testing import CliRunner

from corral.cli import estimate, offers
from corral.cli.errors import CorralGroup

app = typer.Typer(cls=CorralGroup)
app.command("offers")(offers.offers)
app.command("estimate")(estimate.estimate)

#: A100 x1 in two regions, one full A100 kind (cheapest, no capacity), an L40S and an 8-GPU box
CLOUD = """
catalog_date: "2025-05-01"
offers:
  - {id: a, region: us-east, gpu_type: A100, gpu_count: 1, spot_price: 0.5, on_demand_price: 2.0}
  - {id: b, region: eu-west, gpu_type: A100, gpu_count: 1, spot_price: 0.6, on_demand_price: 1.8}
  - {id: full, region: us-east, gpu_type: A100, gpu_count: 1, spot_price: 0.1,
     on_demand_price: 0.3, capacity: 0}
  - {id: l40s, region: us-east, gpu_type: L40S, gpu_count: 1, spot_price: 0.3, on_demand_price: 1.0}
  - {id: big, region: us-east, gpu_type: A100, gpu_count: 8, spot_price: 4.0, on_demand_price: 16.0}
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str) -> dict:
    code, out, err = run(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def write_spec(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)
