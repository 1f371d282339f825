"""``corral debug ...``: tools to exercise the babysitter by hand.

``corral debug preempt RUN`` preempts the machine of a run's current attempt through its
provider, the way a spot market would, so the controller's recovery can be watched live.
"""

from __future__ import annotations

from typing import Any

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


def active_instance(store: Any, run: Any) -> tuple[Any, Any]:
    """(resource, Instance) of the machine the run's current attempt runs on.

    :class:`Conflict` when the run is finished or has no launched machine right now."""
    from corral.errors import Conflict
    from corral.providers.base import Instance

    if run.terminal:
        raise Conflict(f"run {run.id} is {run.state}: it has no machine to preempt")
    for res in store.resources(run_id=run.id, open_only=True):
        if res.attempt == run.attempt and res.state == "active" and res.instance:
            return res, Instance.model_validate(res.instance)
    raise Conflict(
        f"run {run.id} ({run.state}, attempt {run.attempt}) has no launched machine to preempt"
    )


def preempt_run(run_ref: str, grace: float) -> dict[str, Any]:
    """Preempt the run's active machine; returns what was preempted (for --json)."""
    from corral.errors import UnsupportedCapability
    from corral.providers.base import SupportsSimulatedPreemption
    from corral.providers.registry import get_provider
    from corral.store import Store

    store = Store.open()
    run = store.get_run(run_ref)
    res, instance = active_instance(store, run)
    provider = get_provider(res.provider)
    if not isinstance(provider, SupportsSimulatedPreemption):
        reason = type(provider).unsupported.get(
            SupportsSimulatedPreemption.__name__, "it has no way to preempt a machine on request"
        )
        raise UnsupportedCapability(provider.name, "simulated preemption", reason)
    provider.preempt(instance, grace=grace)
    # The controller is not woken with SIGUSR1: one that is still starting has no handler
    # yet and would die of it; it sees the preemption on its next tick (< 1 s).
    state = provider.status(instance)
    return {
        "run_id": run.id,
        "attempt": run.attempt,
        "provider": res.provider,
        "instance_id": instance.instance_id,
        "key": instance.key,
        "grace_s": grace,
        "instance_state": state.state.value,
        "detail": state.detail,
    }


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

    info = preempt_run(run_ref, grace)
    if json_:
        print_json(info)
        return
    console.print(
        f"preempted {info['run_id']} attempt {info['attempt']} on {info['provider']} "
        f"({info['instance_id']}, grace {grace:g}s); the controller will recover it",
        markup=False,
    )
