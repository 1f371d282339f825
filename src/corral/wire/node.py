"""The node-hook protocol: code that runs on the node beside the stages, inside the agent.

The agent runs some hooks of its own (checkpoint sync, artifacts) and, for each
``"module:Class"`` reference in :attr:`corral.wire.plan.AgentPlan.node_hooks`, one hook that a
provider ships in its own folder (an EC2 spot-notice poller, say). A provider's node code
imports this module, :mod:`corral.wire` and :mod:`corral.errors` only, never ``corral.agent``:
this protocol is everything the two sides share.

A hook class is built once per agent with a :class:`NodeContext` (``cls(context)``), before
the attempt starts (it may start a thread, and watch the node from the agent's start-up on).
The runner then calls it at fixed points of the attempt:

* ``before_stages(runner)`` after setup, before the first stage starts. Return a reason (str)
  to fail the attempt, or None.
* ``after_stages(runner, phase)`` once every stage is down, before the attempt is reported
  finished (``phase`` is the attempt's :class:`~corral.wire.status.Phase` value so far). The
  agent's phase reads ``finishing`` meanwhile. Return a reason to turn a succeeded attempt
  into a failed one, or None.
* ``stopping()`` (optional: a hook without it is not called) right before the runner asks
  the stages to stop (a stop request, a preemption, a failed stage), on the runner's thread,
  before any save or stop signal goes out: keep it short; it must not raise.
* ``status()`` its sections of the agent's ``GET /status`` answer: keys of
  :data:`corral.wire.status.HOOK_SECTIONS` (typed fields of ``AgentStatus``; a provider's
  hook uses ``notices`` or ``node``); any other key is left out.
* ``close()`` when the agent shuts down.

What a hook may ask of the runner is :class:`NodeRunner`: a graceful stop of the attempt with
a :class:`~corral.wire.outcome.StopCause` (a preemption notice uses ``PREEMPTION``), the
runner's status, when the attempt started, a gang's nodes so far, and (before the stages) that
the stages resume from a restored checkpoint. It records what it saw through
:class:`EventSink` (event types are the agent's closed set, :mod:`corral.wire.events`).

A hook never raises into the runner: an exception is logged as an ``agent.error`` event and
treated as a failure reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from corral.wire.gang import NodeAttempt
from corral.wire.outcome import StopCause
from corral.wire.plan import AgentPlan


def iso(ts: float) -> str:
    """Unix seconds -> ``2026-11-21T21:30:00.123Z`` (UTC, milliseconds): how the agent and its
    hooks write times in events and status answers."""
    whole = int(ts)
    millis = min(999, int((ts - whole) * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


class EventSink(Protocol):
    """Where a hook records what happened (the agent's event log)."""

    def emit(
        self, type: str, stage: str | None = None, data: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...


class NodeRunner(Protocol):
    """What a hook may ask of the runner of the attempt."""

    started_at: float
    #: a gang's nodes in every attempt of the run so far, as the controller said when the
    #: gang started (``POST /gang/start``; empty on a node of no gang, or before the start)
    gang_nodes: list[NodeAttempt]

    def request_stop(self, reason: str = ..., cause: StopCause = ...) -> None:
        """Graceful stop of the whole attempt; the first request's reason and cause win."""
        ...

    def status(self) -> dict[str, Any]:
        """The agent's ``GET /status`` answer as it stands."""
        ...

    def set_resume(self, path: str) -> None:
        """The attempt starts from the checkpoint restored at ``path`` (called before the
        stages): they get ``CORRAL_RESUME=1``, ``CORRAL_RESUME_FROM=path`` and their
        ``resume_args``."""
        ...


@runtime_checkable
class NodeHook(Protocol):
    """Work the agent does around the stages, besides running them (see the module doc)."""

    name: str

    def before_stages(self, runner: NodeRunner) -> str | None: ...

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None: ...

    def status(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class NodeContext:
    """What a hook is built with: the plan, the agent's event log, where this node keeps the
    agent's state and the checkpoints (the plan's, unless the node's launch said otherwise),
    and the agent's environment (read settings from here, not from ``os.environ``)."""

    plan: AgentPlan
    events: EventSink
    state_dir: str
    checkpoint_dir: str
    environ: Mapping[str, str] = field(default_factory=dict)
    #: this node's rank in the attempt's gang (0: the head, or the attempt's only node)
    node_rank: int = 0


class NodeHookFactory(Protocol):
    """A node hook class: ``cls(context)``."""

    def __call__(self, context: NodeContext) -> NodeHook: ...
