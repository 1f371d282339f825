"""Copying what an agent knows into the store writes only what changed: a steady run's tick
writes nothing, a new status or event is written at once, a cost that moves at most every
``Settings.cost_update_s``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from corral.control import sync
from corral.control.controller import reconcile
from corral.store.states import RunState

from .unitkit import TS, Rig, rig


class WriteCounter:
    """Counts the store's write transactions."""

    def __init__(self, r: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes = 0
        db = r.store._db
        real = db.transaction

        @contextmanager
        def counted(write: bool = False) -> Iterator[object]:
            if write:
                self.writes += 1
            with real(write=write) as tx:
                yield tx

        monkeypatch.setattr(db, "transaction", counted)

    def take(self) -> int:
        n, self.writes = self.writes, 0
        return n


def _tick(r: Rig, seconds: float = 1.0) -> None:
    r.clock.advance(seconds)
    reconcile(r.ctx, r.run())


def test_a_steady_running_runs_tick_writes_nothing_to_the_store(tmp_path: Path, monkeypatch):
    r = rig(tmp_path)
    counter = WriteCounter(r, monkeypatch)
    _tick(r)
    assert counter.take() > 0  # the first status seen is cached on the attempt
    cached = r.store.get_attempt(r.run_id, 1).data["status"]
    for _ in range(5):
        _tick(r)
    r.clock.advance(r.ctx.settings.cost_update_s)  # the cost is due again, and has not moved
    _tick(r)
    assert counter.take() == 0
    assert r.store.get_attempt(r.run_id, 1).data["status"] == cached
    assert r.agent.status_calls == 7  # it was polled every tick all the same


def test_a_new_event_or_a_new_status_is_written_on_the_tick_that_sees_it(
    tmp_path: Path, monkeypatch
):
    r = rig(tmp_path)
    counter = WriteCounter(r, monkeypatch)
    _tick(r)
    counter.take()
    r.agent.emitted.append({"seq": 1, "ts": TS, "type": "note", "data": {"message": "hello"}})
    _tick(r)
    assert counter.take() == 1
    assert any(e.reason == "hello" for e in r.store.events(r.run_id))
    r.agent.phase = "stopping"
    _tick(r)
    assert counter.take() >= 1
    assert r.store.get_attempt(r.run_id, 1).data["status"]["phase"] == "stopping"
    assert r.run().state == RunState.RUNNING


def test_the_cost_of_a_steady_run_is_written_at_most_every_cost_update_s(
    tmp_path: Path, monkeypatch
):
    r = rig(tmp_path)
    monkeypatch.setattr(
        sync, "run_cost", lambda ctx, run_id, steady=None: r.clock.now.second / 10.0
    )
    _tick(r)
    first = r.run().cost_usd
    counter = WriteCounter(r, monkeypatch)
    _tick(r, 20)  # the cost moved, but it is not due yet
    assert counter.take() == 0 and r.run().cost_usd == first
    _tick(r, r.ctx.settings.cost_update_s)
    assert counter.take() == 1 and r.run().cost_usd > first


def test_a_steady_runs_cost_rises_with_the_clock_without_reading_its_attempts(
    tmp_path: Path, monkeypatch
):
    """Every ``cost_update_s`` a steady run's cost is worked out again from the attempts
    read the first time (billed until now); a changed status reads them again."""
    r = rig(tmp_path)
    r.store.update_attempt(r.run_id, 1, price_per_hour=36.0, started_at=r.clock.now)
    reads = []
    real = r.store.attempts
    monkeypatch.setattr(r.store, "attempts", lambda run_id: reads.append(run_id) or real(run_id))
    _tick(r)
    assert len(reads) == 1
    costs = []
    for _ in range(3):
        _tick(r, r.ctx.settings.cost_update_s)
        costs.append(r.run().cost_usd)
    assert len(reads) == 1  # nothing billed changed: no read
    step = r.ctx.settings.cost_update_s * 0.01  # $36/h is a cent a second
    assert costs == pytest.approx([costs[0], costs[0] + step, costs[0] + 2 * step])
    r.agent.phase = "stopping"  # the status moved: the attempts are read again
    _tick(r)
    assert len(reads) == 2
