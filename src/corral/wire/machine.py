"""The provider's view of one machine: the state every provider maps its own states onto.

The provider is the source of truth for "the machine is gone" and for "preempted": an agent
that does not answer is never, alone, a preemption or a crash.
"""

from __future__ import annotations

import enum


class InstanceState(enum.StrEnum):
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    STOPPED = "STOPPED"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"

    @property
    def gone(self) -> bool:
        """The instance no longer runs anything and costs nothing more."""
        return self in (InstanceState.TERMINATED, InstanceState.PREEMPTED, InstanceState.FAILED)
