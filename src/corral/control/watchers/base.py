"""The watcher contract: a small check the controller runs on every active run, each tick.

A watcher looks at one run (its spec, the store, the clock, and the tick's
:class:`~corral.control.observe.Observation` of its machine and agent) and returns a step:
a :class:`~corral.control.transitions.Note` (an event), an
:class:`~corral.control.transitions.AskStop` (a graceful stop of the attempt's agent, the
run keeps its state) or a :class:`~corral.control.transitions.Transition` (the run moves:
the other watchers and the state's handler wait for the next tick). Watchers never write a
run's state themselves. Each one's reset rules are in its docstring.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from corral.control.context import Context
from corral.control.observe import Observation
from corral.control.transitions import Note, Step, finish
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.states import RunState
from corral.wire.outcome import StopCause


class Watcher(ABC):
    """One check. ``states``: the run states it looks at."""

    name: ClassVar[str]
    states: ClassVar[frozenset[RunState]] = frozenset({RunState.RUNNING})

    @abstractmethod
    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        """What the run needs now from this watcher's point of view (None: nothing)."""


def stop(name: str, run: RunRecord, data: dict[str, Any]) -> Step:
    """A watcher's stop: STOPPED with the watcher's name as reason and cause, graceful while
    the job runs, with a ``<name>.stop`` event."""
    return finish(
        RunState.STOPPED,
        name,
        graceful=run.state == RunState.RUNNING,
        cause=StopCause(name),
        events=(Note(f"{name}.stop", f"stopping: {name}", data=data),),
    )
