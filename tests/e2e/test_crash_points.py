"""kill -9 of the controller at the dangerous points of a run's life - during provisioning,
during recovery (teardown of the preempted machine, launch of the next one) and during the
final teardown - then a fresh controller: nothing launched twice, nothing left running.

The "kill" is a BaseException raised right after a provider call returned, before the
controller could record its result: exactly what a SIGKILL at that instant leaves behind (the
in-memory state is lost with the Controller object; only the store and the provider remain).
One more test kills a real controller process while a fake machine is booting.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from control.helpers import start_controller, submit, tick_until, wait_for, write_spec
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.providers.fake import FakeProvider
from corral.store import Store

pytestmark = pytest.mark.slow
CLOUD = {
    "launch_delay_s": 0.0,
    "notice_s": 1.0,
    "offers": [
        {
            "id": "cpu",
            "region": "r1",
            "gpu_count": 0,
            "spot_price": 0.2,
            "on_demand_price": 0.6,
            "capacity": 4,
        }
    ],
}


class Killed(BaseException):
    """The controller died here (not an Exception: the loop's catch-all does not see it)."""


class KillAfter:
    """A provider proxy that 'kills the controller' right after the n-th matching call."""

    def __init__(self, inner: FakeProvider, method: str, when: Any = lambda *a: True):
        self.inner, self.method, self.when = inner, method, when
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if name != self.method:
            return real

        def call(*args: Any, **kw: Any) -> Any:
            result = real(*args, **kw)
            if not self.fired and self.when(*args, **kw):
                self.fired = True
                raise Killed(name)
            return result

        return call


def _controller(store: Store, provider: Any) -> Controller:
    settings = Settings(tick_seconds=0.1, intent_grace_s=0, provider_poll_s=0.3)
    return Controller(Context(store=store, providers={"fake": provider}, settings=settings))


def _setup(tmp_path: Path, run: str) -> tuple[Store, FakeProvider, str, Path]:
    marker = tmp_path / "starts.txt"
    spec = write_spec(
        tmp_path,
        f"""
        name: crashy
        resources: {{spot: true, providers: [fake]}}
        run: echo "$CORRAL_ATTEMPT" >> {marker}; {run}
    """,
    )
    run_id = submit(spec)
    return Store.open(), FakeProvider(CLOUD, timers=False), run_id, marker


def _machines(provider: FakeProvider) -> int:
    return len(list(provider.layout.instances.iterdir()))


def _assert_clean(store: Store, provider: FakeProvider, run_id: str) -> None:
    assert store.resources(run_id=run_id, open_only=True) == []
    assert provider.list_instances() == []
    home_agents = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "corral.agent" in " ".join(p.info["cmdline"] or [])
        and str(provider.home) in " ".join(p.info["cmdline"] or [])
    ]
    assert home_agents == []


def _finish(store: Store, provider: FakeProvider, run_id: str):
    return tick_until(_controller(store, provider), store, run_id, lambda r: r.terminal)


def test_killed_during_provisioning(tmp_path: Path) -> None:
    store, fake, run_id, marker = _setup(tmp_path, "sleep 1")
    with pytest.raises(Killed):
        tick_until(_controller(store, KillAfter(fake, "launch")), store, run_id, lambda r: False)
    run = _finish(store, fake, run_id)
    assert run.state == "SUCCEEDED", run.reason
    assert _machines(fake) == 1 and marker.read_text().split() == ["1"]
    _assert_clean(store, fake, run_id)


def _preempt_once_running(
    store: Store, fake: FakeProvider, run_id: str, controller: Controller
) -> None:
    tick_until(controller, store, run_id, lambda r: r.state == "RUNNING")
    time.sleep(0.5)
    [inst] = fake.list_instances()
    fake.preempt(inst, grace=1.0)


ATTEMPT_ONE_WAITS = 'if [ "$CORRAL_ATTEMPT" = 1 ]; then sleep 60; else echo done; fi'


def test_killed_during_recovery_teardown(tmp_path: Path) -> None:
    store, fake, run_id, marker = _setup(tmp_path, ATTEMPT_ONE_WAITS)
    killer = KillAfter(
        fake, "terminate", when=lambda *a, **k: store.get_run(run_id).state == "RECOVERING"
    )
    first = _controller(store, killer)
    _preempt_once_running(store, fake, run_id, first)
    with pytest.raises(Killed):
        tick_until(first, store, run_id, lambda r: False)
    run = _finish(store, fake, run_id)
    assert run.state == "SUCCEEDED", run.reason
    assert [a.exit_reason for a in store.attempts(run_id)] == ["preempted", "succeeded"]
    assert _machines(fake) == 2 and marker.read_text().split() == ["1", "2"]
    _assert_clean(store, fake, run_id)


def test_killed_during_recovery_launch(tmp_path: Path) -> None:
    store, fake, run_id, marker = _setup(tmp_path, ATTEMPT_ONE_WAITS)
    killer = KillAfter(fake, "launch", when=lambda offer, boot, key: key.endswith("-a2"))
    first = _controller(store, killer)
    _preempt_once_running(store, fake, run_id, first)
    with pytest.raises(Killed):
        tick_until(first, store, run_id, lambda r: False)
    run = _finish(store, fake, run_id)
    assert run.state == "SUCCEEDED", run.reason
    assert _machines(fake) == 2 and marker.read_text().split() == ["1", "2"]
    _assert_clean(store, fake, run_id)


def test_killed_during_final_teardown(tmp_path: Path) -> None:
    store, fake, run_id, marker = _setup(tmp_path, "echo done")
    killer = KillAfter(fake, "terminate")
    with pytest.raises(Killed):
        tick_until(_controller(store, killer), store, run_id, lambda r: False)
    assert store.get_run(run_id).state == "STOPPING"
    run = _finish(store, fake, run_id)
    assert run.state == "SUCCEEDED", run.reason
    assert _machines(fake) == 1 and marker.read_text().split() == ["1"]
    _assert_clean(store, fake, run_id)


def test_a_real_controller_killed_while_the_machine_boots(tmp_path: Path, monkeypatch) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(__import__("json").dumps({**CLOUD, "launch_delay_s": 2.0}))
    monkeypatch.setenv("CORRAL_FAKE_CLOUD", str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    store, _, run_id, marker = _setup(tmp_path, "echo done")
    first = start_controller(tick=0.1)
    wait_for(store, run_id, {"PROVISIONING"})
    deadline = time.monotonic() + 10
    while not store.resources(run_id=run_id, open_only=True) and time.monotonic() < deadline:
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    second = start_controller(tick=0.1)
    try:
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=60)
    finally:
        second.terminate()
        second.wait(10)
    fake = FakeProvider(CLOUD, timers=False)
    assert run.state == "SUCCEEDED", run.reason
    assert _machines(fake) == 1 and marker.read_text().split() == ["1"]
    _assert_clean(store, fake, run_id)
