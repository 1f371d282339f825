"""``corral ls``: the runs in the store, newest first."""

from __future__ import annotations

import typer


def ls(
    all_: bool = typer.Option(
        False, "--all", "-a", help="Include finished runs (default: all runs when none is active)."
    ),
    state: list[str] = typer.Option([], "--state", help="Only runs in this state (repeatable)."),
    limit: int = typer.Option(None, "--limit", "-n", help="At most this many runs."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List runs."""
    from corral.service.runs import list_runs

    runs = []
    if not all_ and not state and not json_:  # the active runs, else every run
        runs = list_runs(active_only=True, limit=limit)
    runs = runs or list_runs(states=state, limit=limit)
    if json_:
        import json
        import sys

        sys.stdout.write(json.dumps([r.to_json() for r in runs], default=str) + "\n")
        return
    from rich.table import Table

    from corral.cli.output import ago, console, fmt_cost, fmt_duration, styled_state

    if not runs:
        console.print("no runs yet: start one with `corral launch corral.yaml`")
        return
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("RUN", "STATE", "ATTEMPT", "COST", "CREATED", "DURATION", "REASON"):
        t.add_column(col)
    for r in runs:
        t.add_row(
            r.id,
            styled_state(r.state),
            str(r.attempt),
            fmt_cost(r.cost_usd),
            ago(r.created_at),
            fmt_duration(r.duration_s),
            (r.reason or "")[:60],
        )
    console.print(t)
