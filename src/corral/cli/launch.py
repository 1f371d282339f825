"""``corral launch FILE``: submit a run and follow it until it ends."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer


def launch(
    file: Path = typer.Argument(..., help="The job spec (corral.yaml)."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a spec field: key.path=value (repeatable)."
    ),
    priority: int = typer.Option(
        None,
        "--priority",
        min=0,
        max=9,
        help="0-9, higher first: the run's place among runs waiting for the same GPUs "
        "(overrides the spec's priority).",
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Submit and return at once."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the end without streaming logs."),
    json_: bool = typer.Option(
        False, "--json", help="Print the run as JSON (the final run with --wait)."
    ),
) -> None:
    """Launch a run. Streams stage logs with a live status line until the run ends; Ctrl-C
    detaches (the run goes on). Exit code 0 if the run SUCCEEDED, 1 if it ended otherwise."""
    from corral.startup import skip_pydantic_plugins

    skip_pydantic_plugins()  # before the spec's models are built
    from corral.errors import EXIT_INTERRUPTED, EXIT_RUN_NOT_SUCCEEDED
    from corral.remote import connect

    overrides = list(set_) + ([f"priority={priority}"] if priority is not None else [])
    remote = connect()
    bars = sys.stderr.isatty() and not json_  # progress bars: for a person watching
    packing = uploading = None
    if bars:
        from corral.cli.output import err_console

        packing = _ProgressBar(err_console, "packing the workdir")
        uploading = _ProgressBar(err_console, "uploading the workdir")
    try:
        if remote is not None:  # CORRAL_SERVER: the code goes there, it submits and babysits
            submitted = remote.submit(
                file, overrides=overrides, pack_progress=packing, upload_progress=uploading
            )
        else:
            from corral.service.submit import submit_run

            submitted = submit_run(file, overrides=overrides, progress=packing)
    finally:
        for bar in (packing, uploading):
            if bar is not None:
                bar.close()
    # the console (rich) is loaded once the first attempt is under way, not before: the
    # agent starts that much sooner
    from corral.cli.output import console, err_console, print_json

    for warning in submitted.warnings:
        err_console.print(_budget_warning_text(warning))
    from rich.markup import escape

    for notice in submitted.notices:
        if notice.startswith("warning: "):  # the spec's (corral.spec.advice)
            err_console.print(f"[yellow]warning:[/] {escape(notice[9:])}", highlight=False)
        else:
            err_console.print(f"[dim]{notice}[/]")
    run = submitted.run

    if detach or (json_ and not wait):
        if json_:
            print_json(run)
        else:
            console.print(
                f"launched [bold]{run.id}[/] ({run.state})\n"
                f"  follow: corral logs -f {run.id}\n  status: corral status {run.id}"
            )
        return
    try:
        if wait and remote is not None:
            run = remote.wait_for_end(run.id)
        elif wait:
            from corral.service.actions import wait_for_end

            run = wait_for_end(run.id)
        elif remote is not None:
            from corral.cli import remote as remote_cli

            err_console.print(f"[dim]run {run.id} on {remote.url} (Ctrl-C detaches)[/]")
            run = remote_cli.follow(remote, run.id)
        else:
            from corral.cli.follow import follow

            err_console.print(f"[dim]run {run.id} (Ctrl-C detaches; the run goes on)[/]")
            run = follow(run.id)
    except KeyboardInterrupt:
        err_console.print(
            f"\ndetached from {run.id}; it keeps running.\n"
            f"  re-attach: corral logs -f {run.id}\n  status:    corral status {run.id}\n"
            f"  stop:      corral stop {run.id}"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if json_:
        print_json(run)
    else:
        from corral.cli.status import print_summary

        if remote is not None:
            print_summary(remote.get_run(run.id))
        else:
            from corral.service.details import get_run

            print_summary(get_run(run.id))
    if run.state != "SUCCEEDED":
        raise typer.Exit(EXIT_RUN_NOT_SUCCEEDED)


def _budget_warning_text(w: Any) -> str:
    """The over-budget warning (a :class:`corral.service.submission.BudgetWarning`) as one line."""
    from corral.cli.output import fmt_cost

    return (
        f"[yellow]warning:[/] {w.provider} at {fmt_cost(w.price_per_hour)}/h for the full "
        f"max_runtime ({w.hours:g} h) costs {fmt_cost(w.worst_cost_usd)}, more than the "
        f"{fmt_cost(w.budget_usd)} budget: the run will be stopped at the budget "
        f"(after {w.hours_at_budget:.1f} h)"
    )


class _ProgressBar:
    """A transient progress bar while the workdir is packed for a remote machine, or uploaded
    to a remote server (shown only once something moves: an unchanged workdir is neither
    packed nor uploaded again)."""

    def __init__(self, console: Any, label: str) -> None:
        self._console = console
        self._label = label
        self._progress: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

            self._progress = Progress(
                TextColumn(self._label),
                BarColumn(),
                DownloadColumn(),
                console=self._console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("pack", total=total)
        self._progress.update(self._task, completed=done)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
