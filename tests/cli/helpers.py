"""Helpers shared by the CLI tests."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from corral.cli.app import app
from support.waiting import wait_until

_runner = CliRunner()


def wait_state(run_id: str, states: set[str], timeout: float = 60.0) -> dict[str, Any]:
    """Poll ``corral status RUN --json`` every 0.1 s until the run is in one of ``states``; that
    status."""
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        result = _runner.invoke(app, ["status", run_id, "--json"])
        assert result.exit_code == 0, result.output
        seen.update(json.loads(result.stdout))
        return dict(seen) if seen["state"] in states else None

    return wait_until(
        reached, timeout, 0.1, lambda: f"{run_id} to be one of {states}; it is {seen.get('state')}"
    )
