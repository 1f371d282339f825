"""Each active run has its own next look (control.schedule): quiet runs slow down, busy ones
and those with a cap or a check coming are looked at sooner, the line for capacity goes one run
at a time in submission order, and a controller may hold only some runs."""

from __future__ import annotations

from corral.control.context import Settings
from corral.control.schedule import Head, Result, Schedule


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _schedule(**settings: float) -> tuple[Schedule, Clock]:
    clock = Clock()
    values = {"tick_seconds": 0.5, "poll_interval_s": 2.0, "wait_retry_s": 3.0, **settings}
    return Schedule(Settings(**values), clock=clock), clock  # type: ignore[arg-type]


def _look(s: Schedule, clock: Clock, run_id: str, result: Result) -> float:
    """Take ``run_id`` when due, file ``result``; the delay until its next look."""
    taken = [slot.run_id for slot in s.take_due()]
    assert run_id in taken, (run_id, taken)
    due = s.done(run_id, result)
    assert due is not None
    return round(due - clock.now, 3)


def test_a_quiet_running_run_slows_to_the_poll_interval_and_a_lively_one_speeds_up() -> None:
    s, clock = _schedule()
    s.sync([Head("r", "RUNNING")])
    delays = []
    for _ in range(5):
        delays.append(_look(s, clock, "r", Result("RUNNING")))
        clock.now += delays[-1]
    assert delays == [0.5, 1.0, 2.0, 2.0, 2.0]
    assert _look(s, clock, "r", Result("RUNNING", lively=True)) == 0.5
    clock.now += 0.5
    assert _look(s, clock, "r", Result("RUNNING", wake_in=0.2)) == 0.2  # a cap coming: sooner
    clock.now += 0.2
    assert _look(s, clock, "r", Result("RUNNING", wake_in=0.0)) == 0.0  # more to copy: at once


def test_provisioning_and_stopping_are_looked_at_every_tick_and_waiting_runs_every_retry():
    s, clock = _schedule()
    s.sync([Head("p", "PROVISIONING"), Head("x", "STOPPING"), Head("w", "RECOVERING")])
    assert {slot.run_id for slot in s.take_due()} == {"p", "x", "w"}
    delays = {
        rid: s.done(rid, Result(state))
        for rid, state in (("p", "PROVISIONING"), ("x", "STOPPING"), ("w", "RECOVERING"))
    }
    assert {rid: round(due - clock.now, 3) for rid, due in delays.items() if due} == {
        "p": 0.5,
        "x": 0.5,
        "w": 3.0,
    }
    assert s.done("gone", Result("SUCCEEDED", gone=True)) is None  # unknown: nothing
    clock.now += 0.5
    assert {slot.run_id for slot in s.take_due()} == {"p", "x"}
    s.done("x", Result("SUCCEEDED", gone=True))
    assert "x" not in s.slots
    s.wake_waiting()  # a run ended: the waiting one tries at once
    assert [slot.run_id for slot in s.take_due()] == ["w"]


def test_a_change_seen_in_the_store_makes_the_run_due_at_once() -> None:
    s, clock = _schedule()
    s.sync([Head("r", "RUNNING")])
    _look(s, clock, "r", Result("RUNNING"))
    clock.now += 0.1
    assert s.take_due() == []
    s.sync([Head("r", "RUNNING", "stop")])  # the CLI asked for a stop
    [slot] = s.take_due()
    assert slot.run_id == "r" and not slot.polled  # a request goes to the operations workers
    s.done("r", Result("STOPPING"))
    assert s.sync([]) == ["r"] and len(s) == 0  # over (or taken by another controller)


def test_a_busy_slot_is_never_handed_out_twice() -> None:
    s, clock = _schedule()
    s.sync([Head("r", "RUNNING")])
    assert [x.run_id for x in s.take_due()] == ["r"]
    s.sync([Head("r", "STOPPING")])
    clock.now += 10
    assert s.take_due() == []
    assert s.sync([]) == []  # in flight: dropped only once its look is back
    s.done("r", Result("STOPPING"))
    assert s.sync([]) == ["r"]


def test_the_line_for_capacity_goes_one_run_at_a_time_oldest_first() -> None:
    s, clock = _schedule()
    s.sync([Head("old", "PENDING"), Head("mid", "PENDING"), Head("run", "RUNNING")])
    taken = [x.run_id for x in s.take_due()]
    assert sorted(taken) == ["old", "run"]  # one of the line, the oldest; polls go anyway
    assert s.take_due() == []  # mid waits for old's turn to end
    s.done("run", Result("RUNNING"))
    assert s.next_due() == clock.now + 0.5  # nothing due before run's next look
    s.done("old", Result("PENDING"))  # no capacity: it waits
    assert s.next_due() == clock.now  # mid's turn: at once
    assert [x.run_id for x in s.take_due() if x.line_turn] == ["mid"]
    s.done("mid", Result("PENDING"))
    # a newer run joins: the older ones are due again and go first
    s.sync([Head("old", "PENDING"), Head("mid", "PENDING"), Head("new", "PENDING")])
    [first] = s.take_due()
    assert first.run_id == "old"
    s.done("old", Result("PROVISIONING"))  # launched: there is room, the line widens
    assert [x.run_id for x in s.take_due()] == ["mid", "new"]  # oldest first, two at once
    s.done("mid", Result("PENDING"))  # no capacity after all: one at a time again
    s.done("new", Result("PENDING"))
    clock.now += 3.0  # their retry
    assert [x.run_id for x in s.take_due() if x.line_turn] == ["mid"]


def test_a_long_line_on_a_provider_with_room_launches_up_to_ops_workers_at_once() -> None:
    s, _ = _schedule()
    s.sync([Head(f"r{i:03}", "PENDING") for i in range(100)])
    widths = []
    for _ in range(6):
        taken = s.take_due()
        widths.append(len(taken))
        for slot in taken:
            s.done(slot.run_id, Result("PROVISIONING"))
    assert widths == [1, 2, 8, 8, 8, 8]  # doubled by each launch, up to Settings.ops_workers


def test_a_controller_looks_only_at_the_runs_it_holds() -> None:
    clock = Clock()
    s = Schedule(Settings(), clock=clock, holds=lambda run_id: run_id.startswith("mine"))
    s.sync([Head("mine-1", "RUNNING"), Head("theirs-1", "RUNNING")])
    assert [x.run_id for x in s.take_due()] == ["mine-1"]


def test_a_stop_or_a_recovery_a_look_decided_goes_on_at_once_and_not_in_the_line() -> None:
    s, clock = _schedule()
    s.sync([Head("a", "RUNNING"), Head("b", "RUNNING")])
    s.take_due()
    assert s.done("a", Result("RECOVERING")) == clock.now  # preempted: teardown, relaunch
    assert s.done("b", Result("STOPPING")) == clock.now
    taken = s.take_due()
    assert sorted(x.run_id for x in taken) == ["a", "b"]  # both at once: no line
    assert not any(x.polled or x.queued for x in taken)
    s.done("a", Result("RECOVERING"))  # no capacity for the next attempt: now it waits
    assert s.slots["a"].queued


def test_a_nudged_run_is_due_at_once_at_the_fast_pace() -> None:
    s, clock = _schedule(poll_interval_s=60.0)
    s.sync([Head("r", "RUNNING"), Head("q", "RUNNING")])
    for _ in range(9):  # quiet looks: the next look drifts out to the 60 s interval
        for slot in s.take_due():
            s.done(slot.run_id, Result("RUNNING"))
        clock.now += 60
    clock.now -= 59
    assert s.take_due() == []  # the next looks are most of a minute away
    s.hurry(["r", "gone"])  # a run the schedule does not hold is ignored
    assert [slot.run_id for slot in s.take_due()] == ["r"]
    s.hurry(["r"])  # being looked at: that look sees what happened
    assert s.take_due() == []
    due = s.done("r", Result("RUNNING"))
    assert due is not None and due - clock.now <= 1.0  # the fast pace again


def test_a_nudged_run_is_looked_at_briskly_for_a_moment_then_at_its_own_pace() -> None:
    """After a nudge (what ``corral debug preempt`` sends) the run is looked at every
    NUDGED_EVERY_S for NUDGED_FOR_S: a job that exits on the signal is seen ended within a
    tenth of a second, not at the next tick; then the quiet pace comes back."""
    from corral.control.schedule import NUDGED_EVERY_S, NUDGED_FOR_S

    s, clock = _schedule(poll_interval_s=60.0)
    s.sync([Head("r", "RUNNING")])
    s.hurry(["r"])
    delays = []
    nudged_at = clock.now
    while clock.now - nudged_at < NUDGED_FOR_S + 5:
        delays.append(_look(s, clock, "r", Result("RUNNING")))
        clock.now += delays[-1]
    brisk = [d for d in delays if d <= NUDGED_EVERY_S]
    assert len(brisk) >= NUDGED_FOR_S / NUDGED_EVERY_S - 1
    assert delays[: len(brisk)] == brisk  # the brisk looks come first, in a row
    assert delays[-1] > 0.5  # then the quiet pace (doubling from the fast one)

    # a run that waits for capacity is not tried again and again (each try asks a cloud)
    s.sync([Head("r", "RUNNING"), Head("w", "RECOVERING")])
    s.hurry(["w"])
    assert _look(s, clock, "w", Result("RECOVERING")) >= 0.5


def test_looks_past_the_poll_workers_room_wait_in_order_and_a_rung_run_goes_before_them() -> None:
    """A controller behind on its routine looks (ten thousand quiet runs on a loaded machine)
    hands its poll workers only what they have room for; the rest wait in the schedule, in
    order, and a run whose agent rang meanwhile is handed out before every one of them."""
    s, clock = _schedule()
    s.sync([Head(f"r{i}", "RUNNING") for i in range(6)])
    clock.now += 5.0  # all overdue
    first = [slot.run_id for slot in s.take_due(polled_room=2)]
    assert first == ["r0", "r1"] and s.deferred
    s.ring(["r5"])  # r5's agent rang: it goes before r2, r3 and r4, due for longer
    assert [slot.run_id for slot in s.take_due(polled_room=2)] == ["r5", "r2"]
    assert s.deferred
    assert [slot.run_id for slot in s.take_due(polled_room=0)] == []
    assert [slot.run_id for slot in s.take_due(polled_room=5)] == ["r3", "r4"]
    assert not s.deferred


def test_a_run_that_rang_during_its_look_goes_before_the_looks_merely_due() -> None:
    s, clock = _schedule()
    s.sync([Head(f"r{i}", "RUNNING") for i in range(3)])
    [busy] = s.take_due(polled_room=1)
    clock.now += 5.0
    s.ring([busy.run_id])  # rang while its look was in flight
    assert s.done(busy.run_id, Result("RUNNING")) == clock.now
    assert [slot.run_id for slot in s.take_due(polled_room=1)] == [busy.run_id]


def test_an_operation_due_behind_looks_waiting_for_room_is_handed_out_at_once() -> None:
    """A stop or a launch goes to the operations workers whatever the poll workers' backlog
    (a controller that just took over thousands of runs still stops one at once)."""
    s, clock = _schedule()
    s.sync([*(Head(f"r{i}", "RUNNING") for i in range(5)), Head("x", "RUNNING")])
    clock.now += 5.0
    assert [slot.run_id for slot in s.take_due(polled_room=1)] == ["r0"] and s.deferred
    clock.now += 1.0
    s.sync([*(Head(f"r{i}", "RUNNING") for i in range(5)), Head("x", "RUNNING", "stop")])
    assert [slot.run_id for slot in s.take_due(polled_room=0)] == ["x"]
    assert s.deferred and s.next_due() is None  # the rest wait for a look's end, not a time
