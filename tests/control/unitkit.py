"""Unit-test kit for the controller's parts: a clock the test moves, a provider whose machine
state the test sets, an agent the test scripts, and a run put in a given state in a real store."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from corral.control.context import Context, Settings
from corral.errors import AgentUnreachable, ProviderError
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    Offer,
    Provider,
    Requirements,
)
from corral.store import RunRecord, Store
from corral.store.states import RunState
from corral.wire.outcome import StopCause
from corral.wire.poll import PollAnswer
from corral.wire.status import AgentStatus

from .helpers import submit, write_spec

ENDPOINT = "http://agent.test:1"


class Clock:
    """``datetime`` now, moved by the test."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class StubProvider(Provider):
    """One machine whose state the test sets; counts the status calls."""

    name = "stub"

    def __init__(self) -> None:
        self.state = InstanceState.RUNNING
        self.fail: ProviderError | None = None
        self.status_calls = 0
        #: a provider that queues launches: waiting in its queue / left it at this time
        self.queued = False
        self.started_at: datetime | None = None
        #: the job went over a limit of the machine and was killed: why
        self.limit: str | None = None

    def offers(self, req: Requirements) -> list[Offer]:
        return [OFFER]

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        raise AssertionError("not launched in unit tests")

    def status(self, instance: Instance) -> InstanceStatus:
        self.status_calls += 1
        if self.fail is not None:
            raise self.fail
        return InstanceStatus(
            state=self.state,
            detail="stub",
            endpoint=ENDPOINT,
            queued=self.queued,
            started_at=self.started_at,
            limit=self.limit,
        )

    def terminate(self, instance: Instance) -> None:
        return None

    def find(self, key: str) -> Instance | None:
        return None


OFFER = Offer(
    provider="stub",
    offer_id="stub-1",
    region="here",
    gpu_type=None,
    gpu_count=0,
    cpus=1,
    memory_gb=1,
    spot=True,
    price_per_hour=0.0,
)


@dataclass
class FakeAgent:
    """The agent API as the controller uses it; ``answers=False`` makes it silent."""

    answers: bool = True
    ready_: bool = True
    phase: str = "running"
    #: when the agent's attempt began (another value: another agent answers)
    started_at: str | None = None
    stops: list[tuple[StopCause, str]] = field(default_factory=list)
    status_calls: int = 0
    #: the agent's events, with their ``seq`` (1, 2, ...)
    emitted: list[dict[str, Any]] = field(default_factory=list)
    #: what its status says each GPU reads (``GpuUsage`` fields)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    #: what its status says of each stage (``StageStatus`` fields)
    stages: list[dict[str, Any]] = field(default_factory=list)

    def _check(self) -> None:
        if not self.answers:
            raise AgentUnreachable("agent at test is silent")

    def ready(self) -> bool:
        self._check()
        return self.ready_

    def status(self) -> AgentStatus:
        self.status_calls += 1
        self._check()
        return AgentStatus.model_validate(
            {
                "run_id": "r",
                "attempt": 1,
                "phase": self.phase,
                "started_at": self.started_at,
                "gpus": self.gpus,
                "stages": self.stages,
            }
        )

    def stop(self, cause: StopCause = StopCause.USER, reason: str = "") -> dict[str, Any]:
        self._check()
        self.stops.append((cause, reason))
        return {}

    def poll(
        self, events_after: int = 0, offsets: dict[str, int] | None = None, log_limit: int = 0
    ) -> PollAnswer:
        """``GET /poll``: the status and the events after ``events_after`` (no stage logs)."""
        status = self.status()
        page = [e for e in self.emitted if e["seq"] > events_after]
        nxt = page[-1]["seq"] if page else events_after
        return PollAnswer.model_validate({"status": status, "events": page, "events_next": nxt})

    def close(self) -> None:
        return None


#: when a test's agent events happened (the agent stamps each one)
TS = "2026-01-01T00:00:00.000Z"


@dataclass
class Rig:
    ctx: Context
    store: Store
    clock: Clock
    provider: StubProvider
    agent: FakeAgent
    run_id: str

    def run(self) -> RunRecord:
        return self.store.get_run(self.run_id)


def rig(
    tmp_path: Path,
    state: RunState = RunState.RUNNING,
    spec_extra: str = "",
    job: str = "run: echo hi\n",
) -> Rig:
    """A run of a one-command job (or of ``job``: the spec's run or stages) in ``state`` on a
    stub machine (attempt 1 launched and its resource ``active``, unless ``state`` is
    PENDING), a context on a test clock."""
    spec = write_spec(tmp_path, f"name: unit\n{job}{spec_extra}")
    run_id = submit(spec)
    clock = Clock()
    store = Store.open(clock=clock)
    provider = StubProvider()
    agent = FakeAgent()
    ctx = Context(
        store=store,
        providers={"stub": provider},
        clock=clock,
        settings=Settings(
            provider_poll_s=5, unreachable_grace_s=60, provision_timeout_s=600, intent_grace_s=0
        ),
        client_factory=lambda endpoint, token: agent,  # type: ignore[arg-type,return-value]
    )
    if state != RunState.PENDING:
        store.transition(run_id, RunState.PROVISIONING, "claimed", attempt=1, provider="stub")
        offer = OFFER.model_dump(mode="json")
        store.create_attempt(run_id, 1, provider="stub", offer=offer, price_per_hour=0.0)
        key = f"{run_id}-a1"
        store.record_intent(run_id=run_id, attempt=1, provider="stub", key=key)
        inst = Instance(provider="stub", instance_id="i-1", key=key, offer=OFFER, endpoint=ENDPOINT)
        store.update_resource(
            key, state="active", instance_id="i-1", instance=inst.model_dump(mode="json")
        )
    if state == RunState.RUNNING:
        store.transition(run_id, RunState.RUNNING, "agent ready")
    return Rig(ctx, store, clock, provider, agent, run_id)
