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
    from corral.cli.follow import LogTailer, follow, format_line, stage_width
    from corral.cli.output import console
    from corral.errors import NotFound
    from corral.store import Store

    store = Store.open()
    run = store.get_run(run_ref)
    if stage and run.spec:
        known = {s.get("name") for s in run.spec.get("stages") or []} or {"main"}
        for s in stage:
            if s not in known and s != "_setup":
                raise NotFound(
                    f"run {run.id} has no stage {s!r} (stages: {', '.join(sorted(known))})"
                )
    if attempt is not None and not 1 <= attempt <= max(run.attempt, 1):
        raise NotFound(f"run {run.id} has no attempt {attempt} (attempts: 1..{run.attempt})")
    if follow_:
        follow(
            store,
            run.id,
            stages=stage or None,
            timestamps=timestamps,
            live=False,
            status_lines=False,
        )
        return
    colors: dict[str, str] = {}
    width = stage_width(run)
    current = 0
    for att, st, ts, text in LogTailer(run.id, stages=stage or None, attempt=attempt).read():
        if att != current:
            if current:
                console.print(f"[bold]── attempt {att} ──[/]")
            current = att
        console.print(format_line(st, ts, text, colors, width, timestamps))
