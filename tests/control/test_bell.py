"""The bell (corral.wire.bell, control.bell, agent.bell): agents ring the controller when
something happens, so a quiet run is pulled rarely and a change is still acted on at once."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.helpers import make_plan
from corral.agent.bell import AgentBell
from corral.agent.main import Agent, NodeLaunch
from corral.control.bell import Bell, bell_settings, quiet_poll_default
from corral.control.context import Settings
from corral.control.controller import reconcile
from corral.control.lock import running_pid
from corral.control.schedule import Head, Result, Schedule
from corral.control.watching import FOLLOW_DIR, followed_runs, mark_followed
from corral.errors import ControllerError
from corral.store import Store
from corral.testing.standin import StandInProvider, StandInServer
from corral.wire import bell
from support.waiting import wait_until

from .standinkit import create_run
from .unitkit import rig


def _token(run_id: str, attempt: int) -> str:
    return f"tok-{run_id}-{attempt}"


def test_a_ring_is_signed_with_the_attempt_token_and_read_back() -> None:
    ring = bell.Ring("r1", 2, "change", 7)
    data = bell.encode(ring, "secret")
    assert bell.peek(data) == ring
    assert bell.genuine(data, ring, "secret")
    assert not bell.genuine(data, ring, "other")
    forged = data.replace(b" 7 ", b" 8 ")
    assert not bell.genuine(forged, bell.peek(forged), "secret")  # type: ignore[arg-type]
    for junk in (b"", b"hello", b"corral-bell/1 r 1 ring 1 x", b"\xff" * 10):
        assert bell.peek(junk) is None
    assert bell.parse_header("127.0.0.1:4000") == bell.BellAddress("127.0.0.1", 4000)
    assert bell.parse_header("[::1]:9;want=progress") == bell.BellAddress("::1", 9, True)
    for bad in (None, "", "nohost", ":80", "h:0", "h:99999", "h:x"):
        assert bell.parse_header(bad) is None


def test_bad_bell_settings_are_one_line_naming_the_variable() -> None:
    assert bell_settings({}) == (("127.0.0.1", 0), None)
    assert bell_settings({"CORRAL_BELL": "off"}) == (None, None)
    assert bell_settings({"CORRAL_BELL": "0.0.0.0:7790", "CORRAL_BELL_ADVERTISE": "ctl:7790"}) == (
        ("0.0.0.0", 7790),
        ("ctl", 7790),
    )
    for env, name in (
        ({"CORRAL_BELL": "nonsense"}, "CORRAL_BELL"),
        ({"CORRAL_BELL_ADVERTISE": "h:0"}, "CORRAL_BELL_ADVERTISE"),
        ({"CORRAL_QUIET_POLL_INTERVAL": "-3"}, "CORRAL_QUIET_POLL_INTERVAL"),
    ):
        with pytest.raises(ControllerError) as err:
            bell_settings(env)
            quiet_poll_default(env)
        assert name in err.value.message and "\n" not in err.value.message
    assert quiet_poll_default({"CORRAL_QUIET_POLL_INTERVAL": "45"}) == 45.0


@pytest.fixture
def rung(tmp_path: Path) -> Iterator[tuple[Bell, list[str], list[float]]]:
    got: list[str] = []
    now = [100.0]
    b = Bell(tmp_path, got.extend, clock=lambda: now[0], token=_token).start()
    yield b, got, now
    b.close()


def test_the_controller_hears_an_agent_and_takes_its_silence_for_a_reason_to_look(
    rung: tuple[Bell, list[str], list[float]],
) -> None:
    b, got, now = rung
    agent = AgentBell("run-a", 1, _token("run-a", 1), beat_s=3600)
    try:
        agent.heard_from(b.header())  # the controller's first request names the bell
        wait_until(lambda: got == ["run-a"], 5, 0.01, "the hello")
        assert b.belled("run-a", 1) and not b.belled("run-a", 2)
        agent.on_event({"type": "progress"})  # nobody asked for progress rings
        agent.on_event({"type": "stage.finished"})
        wait_until(lambda: got == ["run-a", "run-a"], 5, 0.01, "the change")
        agent.ring("beat")  # heard, but nothing to look at
        wait_until(lambda: b.rings == 3, 5, 0.01, "the beat")
        assert got == ["run-a", "run-a"]
        now[0] += bell.SILENT_AFTER_S + 1
        assert not b.belled("run-a", 1)
        assert b.silent() == ["run-a"] and b.silent() == []  # said once
    finally:
        agent.close()


@pytest.mark.parametrize("named", [True, False])
def test_an_agent_whose_launch_named_the_bell_rings_it_once_its_api_answers(
    tmp_path: Path, rung: tuple[Bell, list[str], list[float]], named: bool
) -> None:
    """A machine that comes up is heard at once, not at the controller's next look (a gang
    starts when its last node is ready): no request has named the bell yet."""
    b, got, _ = rung
    plan = make_plan(tmp_path, [{"name": "main", "run": "sleep 30"}])
    launch = NodeLaunch(bell=b.header() if named else None)
    agent = Agent(plan, _token(plan.run_id, plan.attempt), launch=launch)
    agent.start()
    try:
        if named:  # its hello (then a change for each event: the stage started, say)
            wait_until(lambda: bool(got), 10, 0.01, "the hello")
            assert set(got) == {plan.run_id} and b.belled(plan.run_id, plan.attempt)
        else:
            time.sleep(0.5)
            assert got == [] and b.rings == 0  # it rings once a request names the bell
    finally:
        agent.close(timeout=5)


def test_a_forged_or_an_earlier_attempts_ring_changes_nothing(
    rung: tuple[Bell, list[str], list[float]],
) -> None:
    b, got, _ = rung
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target = (b.address.host, b.address.port)
    out.sendto(bell.encode(bell.Ring("run-b", 1, "change", 1), "not-the-token"), target)
    out.sendto(b"GET / HTTP/1.1", target)
    wait_until(lambda: b.refused == 2, 5, 0.01, "the refusals")
    out.sendto(bell.encode(bell.Ring("run-b", 2, "hello", 1), _token("run-b", 2)), target)
    wait_until(lambda: got == ["run-b"], 5, 0.01, "attempt 2's hello")
    out.sendto(bell.encode(bell.Ring("run-b", 1, "change", 2), _token("run-b", 1)), target)
    time.sleep(0.3)
    assert got == ["run-b"] and b.belled("run-b", 2)
    out.close()


def test_a_belled_quiet_run_is_pulled_at_the_quiet_pace_unless_someone_follows_it(
    tmp_path: Path,
) -> None:
    now = [0.0]
    belled = {"a"}
    sched = Schedule(
        Settings(tick_seconds=0.5, poll_interval_s=2.0, quiet_poll_s=30.0),
        clock=lambda: now[0],
        belled=lambda rid, attempt: rid in belled and attempt == 1,
    )
    sched.sync([Head("a", "RUNNING"), Head("b", "RUNNING")])
    delays: dict[str, list[float]] = {"a": [], "b": []}
    for _ in range(40):
        for slot in sched.take_due():
            due = sched.done(slot.run_id, Result("RUNNING", attempt=1))
            assert due is not None
            delays[slot.run_id].append(due - now[0])
        now[0] = min(s.due for s in sched.slots.values())
    assert max(delays["b"]) == 2.0
    assert set(delays["a"]) == {30.0}  # belled: the quiet pace from its first look, no ramp
    # a ring: due at once; what the look saw move is rung too: the quiet pace again after it
    assert sched.slots["a"].due > now[0]
    sched.ring(["a"])
    taken = sched.take_due()
    assert "a" in [s.run_id for s in taken]
    for slot in taken:
        due = sched.done(slot.run_id, Result("RUNNING", lively=True, attempt=1))
        if slot.run_id == "a":
            assert due == now[0] + 30.0
    # followed: back to the usual pace at once, and kept there
    for _ in range(6):
        sched.watch(["a"], now[0] + 5)  # the controller renews it at each read while marked
        now[0] = sched.slots["a"].due
        for slot in sched.take_due():
            assert (sched.done(slot.run_id, Result("RUNNING", attempt=1)) or 0) - now[0] <= 2.0
    # a follower's mark: fresh ones count, stale ones are removed
    home = tmp_path / "home"
    mark_followed("run-1", home)
    mark_followed("../escape", home)
    assert followed_runs(home) == ["run-1"]
    assert followed_runs(home, now=time.time() + 10) == []
    assert followed_runs(home, now=time.time() + 1000) == []
    assert list((home / FOLLOW_DIR).iterdir()) == []


# --- a controller process with stand-in runs: few pulls, changes acted on at once ---------------

RUNS = 150
QUIET_S = 30.0


@pytest.mark.slow
def test_quiet_belled_runs_are_rarely_pulled_and_a_change_is_acted_on_within_two_seconds(
    standin: StandInServer, corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_PROVIDER_PLUGINS", "standin=corral.testing.standin:StandInProvider")
    monkeypatch.setenv("CORRAL_PROVIDERS", "standin")
    monkeypatch.setenv("CORRAL_STANDIN_URL", standin.url)
    monkeypatch.setenv("CORRAL_QUIET_POLL_INTERVAL", str(QUIET_S))
    store = Store.open()
    ids = [create_run(store, f"quiet{i}", "run: sleep 3600\n") for i in range(RUNS)]
    short = create_run(store, "short", "run: sleep 12\n")
    log = corral_home / "controller-test.log"
    with open(log, "ab") as out:
        ctl = subprocess.Popen(
            [sys.executable, "-m", "corral.control"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: running_pid(corral_home) == ctl.pid, 20, message="the controller")
        wait_until(lambda: store.count_runs(states=["RUNNING"]) >= RUNS + 1, 60, 0.2, "every run")
        time.sleep(4.0)  # past the first looks after RUNNING (the interval grows to quiet)
        start = standin.clock()
        time.sleep(8.0)
        gaps = standin.poll_gaps(start, standin.clock())
        keys = {r.key: r.run_id for r in store.resources() if r.attempt == 1}
        quiet = [g["polls"] for k, g in gaps.items() if keys.get(k) in set(ids)]
        # pulled every 2 s, 8 s would be 4 looks each; belled, the interval has grown past 8 s
        assert sum(quiet) <= len(quiet) * 1.5, sorted(quiet)[-10:]
        # the job's end (rung by its agent) is acted on within 2 s
        run = store.get_run(short)
        ends_at = run.started_at.timestamp() + 12 if run.started_at else time.time() + 12
        wait_until(lambda: store.get_run(short).terminal, 30, 0.05, "the short run's end")
        done = [
            e.ts.timestamp()
            for e in store.events(short, types=["run.state"])
            if e.data.get("to") == "SUCCEEDED"
        ]
        assert done and done[0] - ends_at <= 2.5, done[0] - ends_at
        # a preemption: the agent's stop is rung, the run recovers at once
        victim = ids[RUNS // 2]
        provider = StandInProvider(standin.url)
        inst = provider.find(store.resources(run_id=victim)[0].key)
        assert inst is not None
        preempted_at = time.time()
        provider.preempt(inst, grace=0.5)
        wait_until(lambda: store.get_run(victim).attempt == 2, 15, 0.05, "the recovery")
        recovering = [
            e.ts.timestamp()
            for e in store.events(victim, types=["run.state"])
            if e.data.get("to") == "RECOVERING"
        ]
        assert recovering[0] - preempted_at <= 2.0, recovering[0] - preempted_at
    finally:
        ctl.terminate()
        ctl.wait(30)
    assert "Traceback" not in log.read_text()


class _Heard:
    """A bell that has heard every run's agent (``Context.bell``): a belled run."""

    def header(self) -> str:
        return "127.0.0.1:9"

    def belled(self, run_id: str, attempt: int | None) -> bool:
        return True


def test_a_look_at_a_belled_run_that_cannot_reach_its_agent_is_followed_at_the_usual_pace(
    tmp_path: Path,
) -> None:
    """An agent that rang (its attempt ended, a notice) but does not answer the look the ring
    brought (a loaded machine, a request timed out): the next look comes at the usual pace
    (2 s), not the quiet one (30 s): the ring was for something this look could not read, and
    no other ring may come (a signalled agent exits 3 s after its end)."""
    kit = rig(tmp_path)
    kit.ctx.settings.quiet_poll_s = 30.0
    kit.ctx.bell = _Heard()  # type: ignore[assignment]
    sched = Schedule(kit.ctx.settings, clock=lambda: 0.0, belled=lambda rid, attempt: True)
    sched.sync([Head(kit.run_id, "RUNNING")])
    [slot] = sched.take_due()
    kit.agent.answers = True
    assert sched.done(slot.run_id, reconcile(kit.ctx, kit.run(), follow=False)) == 30.0
    sched.ring([kit.run_id])  # the agent rang: due at once
    [slot] = sched.take_due()
    kit.agent.answers = False  # ... and its answer did not come
    due = sched.done(slot.run_id, reconcile(kit.ctx, kit.run(), follow=False))
    assert due is not None and due <= kit.ctx.settings.poll_interval_s, due
