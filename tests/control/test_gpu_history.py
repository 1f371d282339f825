"""The GPU history's sampler through real controller ticks on a test clock: this machine's
fake GPUs (``CORRAL_FAKE_GPUS=L40S:2``) and a running run's node (the GPUs its agent's status
reports, from the poll the controller makes anyway) are recorded at most once a minute, what
is older than the retention is deleted, a stale node status is not recorded again, and a
failed read or write is logged and skipped without stopping the tick."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from corral import gpu
from corral.control.context import Settings
from corral.control.controller import Controller
from corral.control.daemon import history_settings
from corral.errors import ControllerError, StoreError
from corral.store import Store
from support.waiting import wait_until

from .helpers import start_controller
from .unitkit import rig

NODE_GPUS = [
    {"id": "0", "utilization_pct": 55.0, "memory_used_mb": 30000, "memory_total_mb": 46068},
    {"id": "1", "utilization_pct": 91.5, "memory_used_mb": 42000, "memory_total_mb": 46068},
]


def _rows(store: Store) -> dict[tuple[str, int], list[tuple]]:
    with store._db.transaction() as tx:
        got = tx.tuples(
            "SELECT s.kind, s.gpu, r.t, r.util, r.mem_mb, r.temp_c FROM gpu_readings r "
            "JOIN gpu_series s ON s.id = r.series ORDER BY s.kind, s.gpu, r.t"
        )
    out: dict[tuple[str, int], list[tuple]] = {}
    for kind, index, *reading in got:
        out.setdefault((kind, index), []).append(tuple(reading))
    return out


def test_readings_once_a_minute_and_retention_through_controller_ticks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    r = rig(tmp_path)
    r.agent.gpus = NODE_GPUS
    controller = Controller(r.ctx)
    controller.gpu_history.host = "box-1"
    t0 = int(r.clock.now.timestamp())

    controller.tick()  # this machine's two GPUs; the node is polled after the sample
    assert _rows(r.store) == {("host", 0): [(t0, 0, 0, None)], ("host", 1): [(t0, 0, 0, None)]}
    r.clock.advance(30)
    controller.tick()  # half a minute on: nothing new
    assert sum(len(v) for v in _rows(r.store).values()) == 2

    r.clock.advance(31)
    controller.tick()  # a minute on: both machines, the node from its last poll (30 s old)
    rows = _rows(r.store)
    t1 = t0 + 61
    assert rows[("host", 0)] == [(t0, 0, 0, None), (t1, 0, 0, None)]
    assert rows[("node", 0)] == [(t1, 55, 30000, None)]
    assert rows[("node", 1)] == [(t1, 92, 42000, None)]  # rounded to a whole percent
    series = {(s.kind, s.gpu): s for s in r.store.gpu_series()}
    assert (series[("node", 1)].source, series[("node", 1)].attempt) == (r.run_id, 1)
    assert series[("node", 1)].memory_total_mb == 46068
    assert (series[("host", 0)].source, series[("host", 0)].name) == ("box-1", "L40S")

    # a week and a day later: everything recorded so far is past the retention and goes;
    # the node's last status is 8 days old, so it is not recorded again (the host is)
    r.clock.advance(8 * 86400)
    controller.tick()
    t2 = t1 + 8 * 86400
    assert _rows(r.store) == {("host", 0): [(t2, 0, 0, None)], ("host", 1): [(t2, 0, 0, None)]}
    assert {s.kind for s in r.store.gpu_series()} == {"host"}  # the node's series went too
    # the next interval has the node again, from the poll of that tick
    r.clock.advance(60)
    controller.tick()
    assert [k for k in _rows(r.store) if k[0] == "node"] == [("node", 0), ("node", 1)]


def test_a_failed_read_or_write_is_logged_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    r = rig(tmp_path)
    controller = Controller(r.ctx)

    def broken() -> list:
        raise RuntimeError("NVML: driver gone")

    controller.gpu_history._read_host = broken
    with caplog.at_level(logging.WARNING, logger="corral.controller"):
        assert controller.tick() == 1  # the run was still looked at
        r.clock.advance(60)
        controller.tick()
    skipped = [m for m in caplog.messages if "GPU history (host) skipped" in m]
    assert len(skipped) == 1 and "driver gone" in skipped[0]  # once per distinct error
    assert r.run().state == "RUNNING"

    controller.gpu_history._read_host = gpu.sample

    def refuse(*a: object, **kw: object) -> int:
        raise StoreError("database is busy")

    monkeypatch.setattr(r.store, "record_gpu_readings", refuse)
    r.clock.advance(60)
    with caplog.at_level(logging.WARNING, logger="corral.controller"):
        assert controller.tick() == 1
    assert any("GPU history (write) skipped: StoreError" in m for m in caplog.messages)


def test_the_interval_and_retention_come_from_the_environment() -> None:
    defaults = Settings()
    assert (defaults.gpu_history_every_s, defaults.gpu_history_keep_s) == (60.0, 7 * 86400.0)

    def read(**env: str) -> tuple[float | None, float]:
        return history_settings(60.0, 7 * 86400.0, env)

    assert read() == (60.0, 7 * 86400.0)
    assert read(CORRAL_GPU_HISTORY_EVERY="5m", CORRAL_GPU_HISTORY_KEEP="30d") == (300.0, 2592000)
    assert read(CORRAL_GPU_HISTORY_EVERY="off")[0] is None
    assert read(CORRAL_GPU_HISTORY_EVERY="90")[0] == 90.0
    for name, raw in [
        ("CORRAL_GPU_HISTORY_EVERY", "often"),
        ("CORRAL_GPU_HISTORY_EVERY", "-5"),
        ("CORRAL_GPU_HISTORY_KEEP", "0.5s"),
        ("CORRAL_GPU_HISTORY_KEEP", "inf"),
    ]:
        with pytest.raises(ControllerError) as err:
            read(**{name: raw})
        assert str(err.value).startswith(f"{name}={raw!r}: expected a duration")
        assert "\n" not in str(err.value)


def test_no_history_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    r = rig(tmp_path)
    r.ctx.settings.gpu_history_every_s = None
    controller = Controller(r.ctx)
    controller.tick()
    r.clock.advance(timedelta(days=1).total_seconds())
    controller.tick()
    assert _rows(r.store) == {} and r.store.gpu_series() == []


@pytest.mark.slow
def test_a_controller_process_records_this_machines_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample off the loop's thread, in the real process: the fake inventory the
    controller was started with, recorded at its first read of the runs."""
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    proc = start_controller()
    try:
        store = Store.open()
        try:
            wait_until(lambda: len(store.gpu_series()) == 2, 20, message="two GPUs recorded")
            assert {(s.kind, s.gpu, s.name) for s in store.gpu_series()} == {
                ("host", 0, "L40S"),
                ("host", 1, "L40S"),
            }
        finally:
            store.close()
    finally:
        proc.terminate()
        proc.wait(10)
