"""What one tick learns about a run's current attempt, asked at most once per tick.

The watchers and the state's handler look at the same machine and the same agent: an
:class:`Observation` asks the provider and the agent on first use and hands the same answer
(or the same error) to whoever asks next in that tick. Nothing here survives the tick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.control.context import Context
from corral.control.resources import active_resource, instance_of
from corral.errors import (
    AgentError,
    AgentUnreachable,
    CorralError,
    NotFound,
    WireVersionMismatch,
)
from corral.providers.base import Instance, InstanceStatus
from corral.store.records import ResourceRecord, RunRecord
from corral.wire.status import AgentStatus

if TYPE_CHECKING:
    from corral.control.agent_client import AgentClient

_UNSET = object()


class NoMachine(NotFound):
    """The run's current attempt has no launched machine (no ``active`` resource row)."""

    code = "no_machine"


class Observation:
    """Facts about ``run``'s current attempt for one tick: its machine (the provider's view)
    and its agent (``/ready`` or ``/status``). Each is asked once; an error is cached and
    raised again to every later asker."""

    def __init__(self, ctx: Context, run: RunRecord):
        self.ctx = ctx
        self.run = run
        self._resource: object = _UNSET
        self._machine: InstanceStatus | CorralError | None = None
        self._ready: bool | WireVersionMismatch | None = None
        self._status: AgentStatus | AgentError | None = None

    @property
    def resource(self) -> ResourceRecord | None:
        """The attempt's ``active`` resource row (refreshed once the endpoint is known)."""
        if self._resource is _UNSET:
            self._resource = active_resource(self.ctx, self.run)
        return self._resource  # type: ignore[return-value]

    def instance(self) -> Instance:
        inst = instance_of(self.resource)
        if inst is None:
            raise NoMachine(f"run {self.run.id} has no launched machine")
        return inst

    def machine(self) -> InstanceStatus:
        """The provider's status of the machine (raises ProviderError, NoMachine). The agent's
        endpoint is stored on the resource and the attempt once the provider knows it."""
        if self._machine is None:
            try:
                self._machine = self._ask_provider()
            except CorralError as e:
                self._machine = e
        if isinstance(self._machine, CorralError):
            raise self._machine
        return self._machine

    def _ask_provider(self) -> InstanceStatus:
        res, inst = self.resource, self.instance()
        assert res is not None  # instance() found one
        st = self.ctx.provider(res.provider).status(inst)
        if st.endpoint and st.endpoint != inst.endpoint:
            inst = inst.model_copy(update={"endpoint": st.endpoint})
            self._resource = self.ctx.store.update_resource(
                res.key, instance=inst.model_dump(mode="json")
            )
            self.ctx.store.update_attempt(self.run.id, self.run.attempt, endpoint=st.endpoint)
        return st

    def client(self) -> AgentClient:
        """The API client of the attempt's agent (raises AgentUnreachable without an
        endpoint)."""
        inst = instance_of(self.resource)
        if inst is None or not inst.endpoint:
            raise AgentUnreachable(f"run {self.run.id}: the agent's endpoint is not known yet")
        return self.ctx.agent(self.run.id, self.run.attempt, inst.endpoint)

    def ready(self) -> bool:
        """Whether the agent serves its attempt (raises WireVersionMismatch; any other agent
        error or a missing endpoint is "not ready")."""
        if self._ready is None:
            try:
                self._ready = self.client().ready()
            except WireVersionMismatch as e:  # no retry can fix it: the caller fails the run
                self._ready = e
            except AgentError:
                self._ready = False
        if isinstance(self._ready, WireVersionMismatch):
            raise self._ready
        return self._ready

    def status(self) -> AgentStatus:
        """The agent's ``/status`` (raises AgentError, WireVersionMismatch among them)."""
        if self._status is None:
            try:
                self._status = self.client().status()
            except AgentError as e:
                self._status = e
        if isinstance(self._status, AgentError):
            raise self._status
        return self._status

    def agent_answers(self) -> bool:
        """Whether ``/status`` answered this tick (asking it if nobody did yet)."""
        try:
            self.status()
        except AgentError:
            return False
        return True
