"""``corral cancel RUN``: stop paying now (no graceful stop)."""

from __future__ import annotations

import typer


def cancel(
    run_ref: str = typer.Argument(..., metavar="RUN", help="Run id, id prefix or name."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the run has ended."),
    json_: bool = typer.Option(False, "--json", help="Print the run as JSON."),
) -> None:
    """Cancel a run: its machine is terminated at once; the run ends CANCELLED."""
    from corral.cli.requests import request

    request(run_ref, "cancel", wait=wait, json_=json_)
