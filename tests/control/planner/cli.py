"""The planner commands on a CLI of their own (the lead registers them in ``corral``)."""

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
