"""``corral ls``: the runs in the store, newest first.

The table shows at most :data:`DEFAULT_LIMIT` runs unless ``--limit`` or ``--all`` says
otherwise, and says how many more there are; ``--json`` prints every run unless ``--limit``
is given (scripts rely on it), streamed: read a batch at a time and written as it comes, so
memory stays flat and the first runs come at once at any history size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.text import Text

    from corral.service.run_view import RunView

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
    from corral.remote import connect

    remote = connect()
    if remote is not None:  # CORRAL_SERVER: the server's runs
        page_runs = remote.page_runs
    else:
        from corral.service.runs import page_runs

    if json_:
        if remote is not None:
            runs = page_runs(states=state, limit=limit).runs
            _write_json(runs)
        else:
            _print_json(state, limit)
        return
    cap = limit if (limit is not None or all_) else DEFAULT_LIMIT
    page = None
    if not all_ and not state:  # the active runs, else every run
        page = page_runs(active_only=True, limit=cap)
    if page is None or not page.runs:
        page = page_runs(states=state, limit=cap)
    runs = page.runs
    from corral.cli.output import console, err_console

    if not runs:
        console.print("no runs yet: start one with `corral launch corral.yaml`")
        return
    console.print(_table(runs, console.width))
    if page.more:
        err_console.print(f"[dim]{page.more} more: {_more_command(all_, state, page.total)}[/dim]")


def _table(runs: list[RunView], width: int) -> Text:
    """The runs as a borderless table ``width`` columns wide, built as one styled text (no
    markup to parse, no layout pass: the listing's cost stays in reading the runs). Every
    column but the reason keeps its full width (a run id must stay copyable); the reason
    gets what is left of the terminal (2 spaces between columns), on one line, cut with an
    ellipsis."""
    from rich.text import Text

    from corral.cli.output import STATE_STYLE, ago, fmt_cost, fmt_duration

    cols = ("RUN", "STATE", "ATTEMPT", "COST", "CREATED", "DURATION")
    rows = [
        (
            r.id,
            r.state,
            str(r.attempt),
            fmt_cost(r.cost_usd),
            ago(r.created_at),
            fmt_duration(r.duration_s),
        )
        for r in runs
    ]
    widths = [max(len(col), *(len(row[i]) for row in rows)) for i, col in enumerate(cols)]
    room = max(width - sum(widths) - 2 * len(cols), _MIN_REASON)
    out = Text(no_wrap=True, end="")
    for i, col in enumerate(cols):
        out.append(col.ljust(widths[i]) + "  ", style="bold")
    out.append("REASON", style="bold")
    for run, row in zip(runs, rows, strict=True):
        out.append("\n")
        for i, cell in enumerate(row):
            style = STATE_STYLE.get(cell, "white") if i == 1 else None
            out.append(cell.ljust(widths[i]), style=style)
            out.append("  ")
        reason = Text(run.shown_reason)
        reason.truncate(room, overflow="ellipsis")
        out.append_text(reason)
    return out


def _print_json(state: list[str], limit: int | None) -> None:
    """The runs as one JSON array, streamed: read from the store a batch at a time and
    written as they come (the bytes of ``json.dumps`` of the whole list)."""
    from corral.service.runs import iter_runs, list_runs

    runs = list_runs(states=state, limit=limit) if limit is not None else iter_runs(states=state)
    _write_json(runs)


def _write_json(runs: Iterable[RunView]) -> None:
    """``runs`` as one JSON array, each written as it comes."""
    import json
    import sys

    out = sys.stdout
    out.write("[")
    for i, run in enumerate(runs):
        out.write((", " if i else "") + json.dumps(run.to_json(), default=str))
    out.write("]\n")


def _more_command(all_: bool, state: list[str], total: int) -> str:
    """The ``corral ls`` that lists every run of this listing."""
    words = ["corral ls", *(["--all"] if all_ else []), *(f"--state {s}" for s in state)]
    return " ".join([*words, f"--limit {total}"])
