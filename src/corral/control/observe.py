"""What one look at a run learns about its current attempt, asked at most once per look.

The watchers and the state's handler look at the same machine and the same agent: an
:class:`Observation` asks the provider and the agent on first use and hands the same answer
(or the same error) to whoever asks next in that tick. Nothing here survives the tick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.control import sync
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

#: while a machine waits in its provider's queue, its attempt's start moves to now this often
QUEUED_WRITE_S = 60.0


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
        #: what the look at the agent brought (None until :meth:`status` asked it)
        self.pulled: sync.Pulled | None = None
        #: the soonest this run should be looked at again, in seconds from now, as the
        #: watchers and handlers asked (:meth:`soon`; None: its state's usual interval)
        self.wake_in: float | None = None
        #: the look saw the attempt move (its phase, a stage starting or ending): the run is
        #: looked at again soon rather than at its quiet pace
        self.lively = False
        #: a gang's: every node other than the head has a ready agent (set by the gang
        #: watcher; None: not looked at in this tick)
        self.gang_ready: bool | None = None

    def soon(self, seconds: float) -> None:
        """Ask for the run to be looked at again within ``seconds`` (a cap near, a notice,
        a timer running out): the controller's schedule takes the soonest asked."""
        seconds = max(0.0, seconds)
        if self.wake_in is None or seconds < self.wake_in:
            self.wake_in = seconds

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

    def machine(self, *, listed: bool = False) -> InstanceStatus:
        """The provider's status of the machine (raises ProviderError, NoMachine). The agent's
        endpoint is stored on the resource and the attempt once the provider knows it.
        ``listed``: from the provider's listing of every machine where it has one, up to
        ``Settings.provider_poll_s`` old (``control.census``; a belled run's check)."""
        if self._machine is None:
            try:
                self._machine = self._ask_provider(listed)
            except CorralError as e:
                self._machine = e
        if isinstance(self._machine, CorralError):
            raise self._machine
        return self._machine

    def _ask_provider(self, listed: bool) -> InstanceStatus:
        res, inst = self.resource, self.instance()
        assert res is not None  # instance() found one
        provider = self.ctx.provider(res.provider)
        if listed:
            age = self.ctx.settings.provider_poll_s
            st = self.ctx.census.status(res.provider, provider, inst, self.run.id, age)
        else:
            st = provider.status(inst)
        if st.queued or st.started_at is not None:
            self._queue_time(st)
        if st.endpoint and st.endpoint != inst.endpoint:
            inst = inst.model_copy(update={"endpoint": st.endpoint})
            self._resource = self.ctx.store.update_resource(
                res.key, instance=inst.model_dump(mode="json")
            )
            self.ctx.store.update_attempt(self.run.id, self.run.attempt, endpoint=st.endpoint)
        return st

    def _queue_time(self, st: InstanceStatus) -> None:
        """A machine that waited in its provider's queue is billed, and its provision timeout
        counts, from when it left the queue: the attempt's ``started_at`` moves to the
        provider's ``started_at``, and while it is queued, to now (at most once every
        :data:`QUEUED_WRITE_S`, so a long queue costs few writes)."""
        # what was last written, kept in memory: a steady queue costs no read per look
        notes = self.ctx.notes(self.run.id).attempt(self.run.attempt)
        now = self.ctx.clock()
        if st.queued:
            why = st.detail or "queued"
            if self.run.reason != why:  # say why it waits (written when it changes)
                self.ctx.store.update_run(self.run.id, reason=why)
            begun = notes.queue_start
            if begun is None:
                begun = self.ctx.store.get_attempt(self.run.id, self.run.attempt).started_at
            if begun is None or (now - begun).total_seconds() >= QUEUED_WRITE_S:
                self.ctx.store.update_attempt(self.run.id, self.run.attempt, started_at=now)
                self.ctx.notes(self.run.id).cost_basis = None  # billed from a new start
                begun = now
            notes.queue_start = begun
        elif st.started_at is not None and notes.queue_start != st.started_at:
            begun = self.ctx.store.get_attempt(self.run.id, self.run.attempt).started_at
            if begun is None or st.started_at > begun:  # only ever later: queue time is free
                self.ctx.store.update_attempt(
                    self.run.id, self.run.attempt, started_at=st.started_at
                )
                self.ctx.notes(self.run.id).cost_basis = None
            notes.queue_start = st.started_at

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
        """The agent's status, its new events and log bytes copied on the way (one
        ``GET /poll``: :func:`corral.control.sync.pull`; raises AgentError,
        WireVersionMismatch among them). The status is not yet masked or recorded: the
        RUNNING handler does that (:func:`corral.control.sync.record_status`)."""
        if self._status is None:
            try:
                self.pulled = sync.pull(self.ctx, self.run, self.client())
                self._status = self.pulled.status
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
