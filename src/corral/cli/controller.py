"""``corral controller``: run the controller in the foreground, or start/stop/inspect the
background one for this CORRAL_HOME."""

from __future__ import annotations

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="The controller that babysits runs (one per CORRAL_HOME).",
    invoke_without_command=True,
    add_completion=False,
)


@app.callback(invoke_without_command=True)
def controller(
    ctx: typer.Context,
    tick: float = typer.Option(
        0.5, "--tick", help="Seconds between reads of the active runs (a busy run's interval)."
    ),
    poll_interval: float = typer.Option(
        None,
        "--poll-interval",
        help="Seconds between two looks at a quiet running run (default 2, or "
        "CORRAL_POLL_INTERVAL).",
    ),
    idle_exit: float = typer.Option(
        None, "--idle-exit", help="Exit after this many seconds with no active run."
    ),
) -> None:
    """Without a subcommand: run the controller in the foreground (Ctrl-C stops it)."""
    if ctx.invoked_subcommand is not None:
        return
    from corral.service.controller import run_controller

    raise typer.Exit(
        run_controller(idle_exit_s=idle_exit, tick_s=tick, poll_interval_s=poll_interval)
    )


@app.command("start")
def start(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Start the background controller if none runs."""
    from corral.cli.output import console, print_json
    from corral.service.controller import start_controller

    started = start_controller()
    if json_:
        print_json(started)
    else:
        console.print(f"controller running (pid {started.pid})")


@app.command("stop")
def stop(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Stop the background controller. Runs keep running; a new controller re-attaches."""
    from corral.cli.output import console, print_json
    from corral.service.controller import stop_controller

    stopped = stop_controller()
    if json_:
        print_json(stopped)
    elif stopped.stopped:
        console.print(f"controller {stopped.pid} stopped")
    else:
        console.print("no controller was running")


@app.command("status")
def status(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Is a controller running for this CORRAL_HOME?"""
    from corral.cli.output import console, print_json
    from corral.service.controller import controller_status

    found = controller_status()
    if json_:
        print_json(found)
    elif found.running:
        console.print(f"controller running (pid {found.pid}) for {found.home}")
    else:
        console.print(f"no controller running for {found.home}")
