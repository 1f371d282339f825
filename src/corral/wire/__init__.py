"""The wire contract between the controller and a node: what crosses from one to the other.

Everything that travels between ``corral.control`` (the controller) and ``corral.agent`` (the
node) is defined here and nowhere else:

* :mod:`~corral.wire.plan`     the agent plan, built once by the controller for one attempt;
* :mod:`~corral.wire.status`   the agent's ``GET /status`` answer, typed, hook sections too;
* :mod:`~corral.wire.events`   the agent's event records and their types;
* :mod:`~corral.wire.outcome`  what the end of an attempt means (one decision, one typed value);
* :mod:`~corral.wire.machine`  the provider's view of a machine (``InstanceState``);
* :mod:`~corral.wire.env`      the ``CORRAL_*`` environment contract of stages and the SDK.

The package imports nothing of corral's but ``corral.errors``; control, agent, providers and
the SDK import it. This module stays import-light (the SDK reads it from training scripts):
the submodules are imported on demand.

The contract carries :data:`WIRE_VERSION`. A controller that talks to an agent of another
wire version gets :class:`~corral.errors.WireVersionMismatch`, naming both versions.
"""

from __future__ import annotations

from corral.errors import WireVersionMismatch

#: Bumped on every change to the plan, the status or the events that an agent of the previous
#: version would misread. Agents and controllers of one corral release always agree.
WIRE_VERSION = 1


def check_version(peer: object, *, who: str = "agent") -> None:
    """Raise :class:`WireVersionMismatch` unless ``peer`` (the version the other side sent;
    None or missing: a corral from before the contract had versions) is :data:`WIRE_VERSION`."""
    if peer == WIRE_VERSION and not isinstance(peer, bool):
        return
    shown = "none (a corral older than the versioned wire contract)" if peer is None else repr(peer)
    raise WireVersionMismatch(
        f"the {who} speaks wire version {shown}; this corral speaks {WIRE_VERSION}: "
        f"install the same corral release on both sides",
        fields={"peer_version": peer, "version": WIRE_VERSION, "peer": who},
    )
