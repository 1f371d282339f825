"""``corral debug ...``: tools to exercise the babysitter by hand.

``corral debug preempt RUN`` preempts the machine of a run's current attempt through its
provider, the way a spot market would, so the controller's recovery can be watched live.
"""

from __future__ import annotations

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Tools to exercise corral by hand (simulated preemptions, ...).",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _debug() -> None:
    """Tools to exercise corral by hand (simulated preemptions, ...)."""


@app.command("preempt")
def preempt(
    run_ref: str = typer.Argument(..., metavar="RUN", help="Run id, id prefix or name."),
    grace: float = typer.Option(
        5.0, "--grace", min=0.0, help="Seconds from SIGTERM to SIGKILL of the machine."
    ),
    json_: bool = typer.Option(False, "--json", help="Print what was preempted as JSON."),
) -> None:
    """Preempt RUN's machine as a spot market would: SIGTERM, then SIGKILL after --grace
    seconds. The controller then recovers the run from its last checkpoint."""
    from corral.cli.output import console, print_json
    from corral.service.preempt import preempt_run

    done = preempt_run(run_ref, grace=grace)
    if json_:
        print_json(done)
        return
    console.print(
        f"preempted {done.run_id} attempt {done.attempt} on {done.provider} "
        f"({done.instance_id}, grace {grace:g}s); the controller will recover it",
        markup=False,
    )
