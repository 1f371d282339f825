"""The controller's loop (``Controller.serve``): runs are looked at concurrently, each on its
own schedule, so one agent that takes seconds to answer, or one cloud call that takes seconds
to tear a machine down, delays no other run."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.providers.base import Instance, InstanceStatus
from corral.store import Store
from corral.store.states import RunState
from corral.wire.status import AgentStatus
from support.waiting import wait_until

from .helpers import submit, write_spec
from .unitkit import OFFER, FakeAgent, StubProvider

INTERVAL = 0.4  # a quiet run's interval in these tests
SLACK = 0.6


class TimedAgent(FakeAgent):
    """A FakeAgent that notes when it is asked and can take its time answering."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.asked: list[float] = []

    def status(self) -> AgentStatus:
        self.asked.append(time.monotonic())
        if self.delay:
            time.sleep(self.delay)
        return super().status()


class SlowTeardown(StubProvider):
    """Terminating the machine of ``slow_key`` takes ``seconds``."""

    def __init__(self, slow_key: str, seconds: float) -> None:
        super().__init__()
        self.slow_key, self.seconds = slow_key, seconds
        self.terminated: list[str] = []

    def status(self, instance: Instance) -> InstanceStatus:
        st = super().status(instance)
        return st.model_copy(update={"endpoint": f"http://{instance.key}.test:1"})

    def terminate(self, instance: Instance) -> None:
        if instance.key == self.slow_key:
            time.sleep(self.seconds)
        self.terminated.append(instance.key)


def _running_runs(tmp_path: Path, store: Store, n: int) -> list[str]:
    """``n`` RUNNING runs, each on a stub machine of its own (attempt 1, resource active)."""
    ids = []
    for i in range(n):
        d = tmp_path / f"job{i}"
        d.mkdir()
        run_id = submit(write_spec(d, f"name: loop{i}\nrun: sleep 60\n"))
        store.transition(run_id, RunState.PROVISIONING, "claimed", attempt=1, provider="stub")
        store.create_attempt(
            run_id, 1, provider="stub", offer=OFFER.model_dump(mode="json"), price_per_hour=0.0
        )
        key = f"{run_id}-a1"
        store.record_intent(run_id=run_id, attempt=1, provider="stub", key=key)
        endpoint = f"http://{key}.test:1"
        inst = Instance(
            provider="stub", instance_id=f"i-{i}", key=key, offer=OFFER, endpoint=endpoint
        )
        store.update_resource(
            key, state="active", instance_id=inst.instance_id, instance=inst.model_dump(mode="json")
        )
        store.transition(run_id, RunState.RUNNING, "agent ready")
        ids.append(run_id)
    return ids


@pytest.fixture
def serving() -> Iterator[list[Controller]]:
    """The controllers a test serves in threads, stopped at its end whatever happened."""
    controllers: list[Controller] = []
    yield controllers
    for c in controllers:
        c.stop()


def _serve(controller: Controller, controllers: list[Controller]) -> threading.Thread:
    controllers.append(controller)
    thread = threading.Thread(target=controller.serve, daemon=True)
    thread.start()
    return thread


def _gaps(times: list[float], start: float, end: float) -> float:
    marks = [start, *[t for t in times if start < t < end], end]
    return max(b - a for a, b in itertools.pairwise(marks))


def test_an_agent_slow_to_answer_delays_no_other_run(tmp_path: Path, serving) -> None:
    store = Store.open()
    ids = _running_runs(tmp_path, store, 6)
    agents = {f"http://{rid}-a1.test:1": TimedAgent() for rid in ids}
    slow = agents[f"http://{ids[0]}-a1.test:1"]
    slow.delay = 3.0  # every answer takes 3 s (the client's timeout is 5 s)
    provider = SlowTeardown("none", 0)
    settings = Settings(tick_seconds=0.1, poll_interval_s=INTERVAL, provider_poll_s=60)
    ctx = Context(
        store=store,
        providers={"stub": provider},
        settings=settings,
        client_factory=lambda endpoint, token: agents[endpoint],  # type: ignore[return-value,arg-type]
    )
    thread = _serve(Controller(ctx), serving)
    wait_until(lambda: all(len(a.asked) >= 2 for a in agents.values() if a is not slow), 10)
    start = time.monotonic()
    time.sleep(4.0)
    end = time.monotonic()
    worst = {rid: _gaps(agents[f"http://{rid}-a1.test:1"].asked, start, end) for rid in ids[1:]}
    assert max(worst.values()) <= INTERVAL + SLACK, worst
    assert len(slow.asked) >= 2  # the slow one is looked at too, on its own time
    serving[0].stop()
    thread.join(10)
    assert not thread.is_alive()


def test_a_slow_teardown_delays_no_other_run(tmp_path: Path, serving) -> None:
    store = Store.open()
    ids = _running_runs(tmp_path, store, 4)
    agents = {f"http://{rid}-a1.test:1": TimedAgent() for rid in ids}
    provider = SlowTeardown(f"{ids[0]}-a1", 3.0)
    settings = Settings(tick_seconds=0.1, poll_interval_s=INTERVAL, provider_poll_s=60)
    ctx = Context(
        store=store,
        providers={"stub": provider},
        settings=settings,
        client_factory=lambda endpoint, token: agents[endpoint],  # type: ignore[return-value,arg-type]
    )
    controller = Controller(ctx)
    thread = _serve(controller, serving)
    wait_until(lambda: all(len(a.asked) >= 2 for a in agents.values()), 10)
    store.request_action(ids[0], "cancel")  # terminate now: its teardown takes 3 s
    controller.poke()
    wait_until(lambda: store.get_run(ids[0]).state == RunState.STOPPING, 5)
    start = time.monotonic()
    time.sleep(2.5)
    end = time.monotonic()
    assert store.get_run(ids[0]).state == RunState.STOPPING  # still tearing down
    worst = {rid: _gaps(agents[f"http://{rid}-a1.test:1"].asked, start, end) for rid in ids[1:]}
    assert max(worst.values()) <= INTERVAL + SLACK, worst
    wait_until(lambda: store.get_run(ids[0]).state == RunState.CANCELLED, 10)
    assert provider.terminated == [f"{ids[0]}-a1"]
    controller.stop()
    thread.join(10)
