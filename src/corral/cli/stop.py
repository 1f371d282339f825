"""``corral stop RUN``: graceful stop."""

from __future__ import annotations

import typer


def stop(
    run_ref: str = typer.Argument(..., metavar="RUN", help="Run id, id prefix or name."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the run has ended."),
    json_: bool = typer.Option(False, "--json", help="Print the run as JSON."),
) -> None:
    """Stop a run gracefully: stages get SIGTERM (the SDK saves a checkpoint), then the grace
    period, then the machine is terminated; the run ends STOPPED (reason: user)."""
    from corral.cli.requests import request

    request(run_ref, "stop", wait=wait, json_=json_)
