"""``corral logs RUN``: the stage logs of a run (all attempts), optionally followed."""

from __future__ import annotations

import typer


def logs(
    run_ref: str = typer.Argument(..., metavar="RUN", help="Run id, id prefix or name."),
    follow_: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    stage: list[str] = typer.Option([], "--stage", "-s", help="Only this stage (repeatable)."),
    attempt: int = typer.Option(None, "--attempt", help="Only this attempt."),
    timestamps: bool = typer.Option(False, "--timestamps", "-t", help="Show each line's UTC time."),
    node: int = typer.Option(
        None,
        "--node",
        min=0,
        help="A multi-node run: only this node's logs (0: the head). Default: every node's, "
        "each line prefixed with its node.",
    ),
    machine: bool = typer.Option(
        False,
        "--machine",
        help="Show the machine's console log as its provider keeps it (shown by itself when "
        "the agent never sent a stage log).",
    ),
) -> None:
    """Print a run's stage logs, prefixed by stage name."""
    from corral.remote import connect

    remote = connect()
    if remote is not None and node is not None:
        from corral.errors import BadInput

        raise BadInput("--node: a corral server does not serve one node's logs yet (CORRAL_SERVER)")
    if remote is not None:  # CORRAL_SERVER: the server's copy of the logs
        from corral.cli import remote as remote_cli

        if follow_:
            remote_cli.follow(remote, run_ref, stages=stage, timestamps=timestamps)
        else:
            remote_cli.print_logs(
                remote, run_ref, stages=stage, attempt=attempt, timestamps=timestamps
            )
        return

    from corral.cli.follow import LinePrinter, follow
    from corral.cli.output import console
    from corral.service.logs import log_files, open_logs

    no_stage_log = (
        not follow_
        and not stage
        and not any(f.size for f in log_files(run_ref) if attempt in (None, f.attempt))
    )
    if (machine or no_stage_log) and _machine_log(run_ref, attempt, required=machine):
        return
    tailer = open_logs(run_ref, stages=stage, attempt=attempt, node=node)
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


def _machine_log(run_ref: str, attempt: int | None, *, required: bool) -> bool:
    """Print the machine's console log from its provider; whether anything was printed. Only
    ``required`` (``--machine``) turns "the provider keeps none" into an error."""
    from corral.cli.output import console
    from corral.errors import NotFound, UnsupportedCapability
    from corral.service.machine_logs import machine_log

    try:
        found = machine_log(run_ref, attempt=attempt)
    except (NotFound, UnsupportedCapability):
        if required:
            raise
        return False
    kept = " (kept when the attempt ended)" if found.kept else ""
    console.print(
        f"[dim]no stage log from the agent of attempt {found.attempt}; the console log of "
        f"{found.provider} machine {found.instance_id}{kept}:[/dim]",
        highlight=False,
    )
    for line in found.text.splitlines():
        console.print(line, markup=False, highlight=False)
    return True
