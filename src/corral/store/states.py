"""Run states, resource states and the actions a user can request. Control code imports these.

A run moves PENDING -> PROVISIONING -> RUNNING -> (RECOVERING -> PROVISIONING -> RUNNING)* and
ends in one of the TERMINAL_STATES. STOPPING is the wind-down (graceful stop, artifact upload,
teardown) on the way to the terminal state held in the run's ``outcome``. A terminal run never
leaves its state: the store refuses the transition.
"""

from __future__ import annotations

import enum


class RunState(enum.StrEnum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    STOPPED = "STOPPED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


RUN_STATES: frozenset[str] = frozenset(RunState)
TERMINAL_STATES: frozenset[str] = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.STOPPED}
)
ACTIVE_STATES: frozenset[str] = RUN_STATES - TERMINAL_STATES
#: the condition of the partial index ``ix_runs_active`` (the unfinished runs, newest first),
#: spelled exactly so in the queries that use it: SQLite uses a partial index only for a query
#: with the very same term
ACTIVE_RUNS_SQL = "state IN ({})".format(", ".join(f"'{s}'" for s in sorted(ACTIVE_STATES)))


class Action(enum.StrEnum):
    """What the CLI asks the controller to do with a run (``runs.requested_action``)."""

    CANCEL = "cancel"  # abort now: terminate, run ends CANCELLED
    STOP = "stop"  # graceful: let the job save and upload, run ends STOPPED


ACTIONS: frozenset[str] = frozenset(Action)


class ResourceState(enum.StrEnum):
    """The life of one paid instance in the intent log (``resources.state``)."""

    INTENT = "intent"  # written BEFORE provider.launch is called
    ACTIVE = "active"  # the provider returned an instance
    TERMINATING = "terminating"  # terminate requested, not confirmed yet
    GONE = "gone"  # the provider confirmed the instance is gone (final)


RESOURCE_STATES: frozenset[str] = frozenset(ResourceState)
OPEN_RESOURCE_STATES: frozenset[str] = RESOURCE_STATES - {ResourceState.GONE}
