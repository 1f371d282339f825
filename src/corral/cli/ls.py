"""``corral ls``: the runs in the store, newest first.

The table shows at most :data:`DEFAULT_LIMIT` runs unless ``--limit`` or ``--all`` says
otherwise, and says how many more there are; ``--json`` prints every run unless ``--limit``
is given (scripts rely on it).
"""

from __future__ import annotations

import typer

#: the reason column's width when the terminal has no room left for it (the table overflows)
_MIN_REASON = 12
#: runs in the table when neither --limit nor --all is given
DEFAULT_LIMIT = 50


def ls(
    all_: bool = typer.Option(
        False,
        "--all",
        "-a",
        help="Every run: finished ones too (the default when none is active), with no limit "
        "unless --limit is given.",
    ),
    state: list[str] = typer.Option([], "--state", help="Only runs in this state (repeatable)."),
    limit: int = typer.Option(
        None,
        "--limit",
        "-n",
        help=f"At most this many runs (default: {DEFAULT_LIMIT}; every run with --all or --json).",
    ),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List runs."""
    from corral.service.runs import page_runs

    cap = limit if (limit is not None or all_ or json_) else DEFAULT_LIMIT
    page = None
    if not all_ and not state and not json_:  # the active runs, else every run
        page = page_runs(active_only=True, limit=cap)
    if page is None or not page.runs:
        page = page_runs(states=state, limit=cap)
    runs = page.runs
    if json_:
        import json
        import sys

        sys.stdout.write(json.dumps([r.to_json() for r in runs], default=str) + "\n")
        return
    from rich.table import Table

    from corral.cli.output import ago, console, err_console, fmt_cost, fmt_duration, styled_state

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
    if page.more:
        err_console.print(f"[dim]{page.more} more: {_more_command(all_, state, page.total)}[/dim]")


def _more_command(all_: bool, state: list[str], total: int) -> str:
    """The ``corral ls`` that lists every run of this listing."""
    words = ["corral ls", *(["--all"] if all_ else []), *(f"--state {s}" for s in state)]
    return " ".join([*words, f"--limit {total}"])
