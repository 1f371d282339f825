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
    tick: float = typer.Option(0.5, "--tick", help="Seconds between reconcile passes."),
    idle_exit: float = typer.Option(
        None, "--idle-exit", help="Exit after this many seconds with no active run."
    ),
) -> None:
    """Without a subcommand: run the controller in the foreground (Ctrl-C stops it)."""
    if ctx.invoked_subcommand is not None:
        return
    from corral.control.daemon import run_foreground

    raise typer.Exit(run_foreground(idle_exit_s=idle_exit, tick_seconds=tick))


@app.command("start")
def start(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Start the background controller if none runs."""
    from corral.cli.output import console, print_json
    from corral.control.daemon import start_background

    pid = start_background()
    if json_:
        print_json({"running": True, "pid": pid})
    else:
        console.print(f"controller running (pid {pid})")


@app.command("stop")
def stop(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Stop the background controller. Runs keep running; a new controller re-attaches."""
    from corral.cli.output import console, print_json
    from corral.control.daemon import stop_background

    pid = stop_background()
    if json_:
        print_json({"stopped": pid is not None, "pid": pid})
    else:
        console.print(f"controller {pid} stopped" if pid else "no controller was running")


@app.command("status")
def status(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Is a controller running for this CORRAL_HOME?"""
    from corral import paths
    from corral.cli.output import console, print_json
    from corral.control.lock import running_pid

    pid = running_pid()
    info = {"running": pid is not None, "pid": pid, "home": str(paths.home())}
    if json_:
        print_json(info)
    elif pid:
        console.print(f"controller running (pid {pid}) for {info['home']}")
    else:
        console.print(f"no controller running for {info['home']}")
