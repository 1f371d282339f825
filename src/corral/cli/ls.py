"""``corral ls``: the runs in the store, newest first."""

from __future__ import annotations

import typer

#: the reason column's width when the terminal has no room left for it (the table overflows)
_MIN_REASON = 12


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
    rows = [
        (
            r.id,
            styled_state(r.state),
            str(r.attempt),
            fmt_cost(r.cost_usd),
            ago(r.created_at),
            fmt_duration(r.duration_s),
            r.shown_reason,
        )
        for r in runs
    ]
    plain = [(r.id, r.state, *row[2:6]) for r, row in zip(runs, rows, strict=True)]
    cols = ("RUN", "STATE", "ATTEMPT", "COST", "CREATED", "DURATION")
    widths = [max(len(col), *(len(row[i]) for row in plain)) for i, col in enumerate(cols)]
    t = Table(box=None, pad_edge=False, header_style="bold")
    # every column but the reason keeps its full width (a run id must stay copyable); the
    # reason gets what is left of the terminal (2 spaces between columns), on one line,
    # cut with an ellipsis
    for col, width in zip(cols, widths, strict=True):
        t.add_column(col, no_wrap=True, min_width=width)
    left = console.width - sum(widths) - 2 * len(cols)
    t.add_column("REASON", no_wrap=True, overflow="ellipsis", max_width=max(left, _MIN_REASON))
    for row in rows:
        t.add_row(*row)
    console.print(t)
