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
    from corral.errors import BadInput
    from corral.store import Store
    from corral.store.states import RUN_STATES

    states = [s.upper() for s in state] or None
    for s in states or []:
        if s not in RUN_STATES:
            raise BadInput(f"--state {s!r}: expected one of {', '.join(sorted(RUN_STATES))}")
    store = Store.open()
    runs = store.list_runs(states=states)
    if not all_ and not states and not json_:
        active = [r for r in runs if r.active]
        runs = active or runs
    if limit is not None:
        runs = runs[:limit]
    if json_:
        import json
        import sys

        from corral.cli.output import run_dict

        sys.stdout.write(json.dumps([run_dict(r) for r in runs], default=str) + "\n")
        return
    from rich.table import Table

    from corral.cli.output import ago, console, fmt_cost, fmt_duration, run_duration, styled_state

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
            fmt_duration(run_duration(r)),
            (r.reason or "")[:60],
        )
    console.print(t)
