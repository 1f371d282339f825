"""``corral schedule add|ls|rm``: start a job on a cron schedule."""

from __future__ import annotations

from pathlib import Path

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Start jobs on a cron schedule (the spec's `schedule:`).",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _schedule() -> None:
    """Start jobs on a cron schedule (the spec's `schedule:`)."""


@app.command("add")
def add(
    file: Path = typer.Argument(..., help="The job spec, with a `schedule:` section."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a spec field: key.path=value (repeatable)."
    ),
    name: str = typer.Option(None, "--name", help="Schedule name (default: the job's name)."),
    replace: bool = typer.Option(False, "--replace", help="Replace a schedule of that name."),
    json_: bool = typer.Option(False, "--json", help="Print the schedule as JSON."),
) -> None:
    """Register FILE to start on its cron schedule; a controller starts one run per tick
    (it is started now, and keeps running while schedules exist)."""
    from corral.cli.output import console, print_json
    from corral.service.schedules import add_schedule

    view = add_schedule(file, overrides=list(set_), name=name, replace=replace)
    if json_:
        print_json(view)
        return
    console.print(
        f"schedule [bold]{view.name}[/]: {view.cron} ({view.timezone}), missed ticks: "
        f"{view.missed}; next run at {_when(view.next_at)}"
    )


def _when(moment: object) -> str:
    from datetime import datetime

    if not isinstance(moment, datetime):
        return "-"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


@app.command("ls")
def ls(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The registered schedules, with their next tick and last run."""
    from corral.cli.output import console, print_json
    from corral.service.schedules import list_schedules

    views = list_schedules()
    if json_:
        print_json([v.to_json() for v in views])
        return
    if not views:
        console.print("no schedule (corral schedule add FILE registers one)")
        return
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NAME", "CRON", "TZ", "MISSED", "NEXT", "LAST RUN", "RUNS", "SKIPPED"):
        t.add_column(col)
    for v in views:
        t.add_row(
            v.name,
            v.cron,
            v.timezone,
            v.missed,
            _when(v.next_at),
            v.last_run_id or "-",
            str(v.fired),
            str(v.skipped),
        )
    console.print(t)


@app.command("rm")
def rm(
    name: str = typer.Argument(..., help="The schedule's name."),
    json_: bool = typer.Option(False, "--json", help="Print the removed schedule as JSON."),
) -> None:
    """Remove a schedule (the runs it started stay)."""
    from corral.cli.output import console, print_json
    from corral.service.schedules import remove_schedule

    view = remove_schedule(name)
    if json_:
        print_json(view)
        return
    console.print(f"removed schedule {view.name} (it started {view.fired} runs)")
