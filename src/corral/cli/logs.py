"""``corral logs RUN``: the stage logs of a run (all attempts), optionally followed."""

from __future__ import annotations

import typer


def logs(
    run_ref: str = typer.Argument(..., metavar="RUN", help="Run id, id prefix or name."),
    follow_: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    stage: list[str] = typer.Option([], "--stage", "-s", help="Only this stage (repeatable)."),
    attempt: int = typer.Option(None, "--attempt", help="Only this attempt."),
    timestamps: bool = typer.Option(False, "--timestamps", "-t", help="Show each line's UTC time."),
) -> None:
    """Print a run's stage logs, prefixed by stage name."""
    from corral.cli.follow import LinePrinter, follow
    from corral.cli.output import console
    from corral.service.logs import open_logs

    tailer = open_logs(run_ref, stages=stage, attempt=attempt)
    if follow_:
        follow(
            tailer.run_id,
            stages=stage or None,
            timestamps=timestamps,
            live=False,
            status_lines=False,
        )
        return
    LinePrinter(tailer, timestamps=timestamps).emit(console.print)
