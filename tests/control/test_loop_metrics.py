"""The controller's loop metrics: a cumulative histogram of tick durations, written to
CORRAL_HOME at most every flush interval, read back by the server's side."""

from __future__ import annotations

import json
from pathlib import Path

from corral.control import loop_metrics
from corral.control.loop_metrics import BUCKETS, LoopMetrics


def test_ticks_land_in_cumulative_buckets_and_the_file_is_written_when_due(tmp_path: Path) -> None:
    now = [100.0]
    m = LoopMetrics(tmp_path, clock=lambda: now[0], wall=lambda: 1_800_000_000.0, flush_s=5.0)
    assert loop_metrics.read(tmp_path) is None
    m.observe(0.004, 2)  # the first tick writes at once
    first = loop_metrics.read(tmp_path)
    assert first is not None and first["ticks"] == 1 and first["active_runs"] == 2
    m.observe(0.3, 3)
    m.observe(99.0, 1)
    assert loop_metrics.read(tmp_path) == first  # not due yet
    now[0] += 5.0
    m.observe(0.02, 0)
    data = json.loads((tmp_path / loop_metrics.FILE).read_text())
    buckets = dict((str(le), n) for le, n in data["tick_seconds"]["buckets"])
    assert len(buckets) == len(BUCKETS) + 1
    assert (buckets["0.005"], buckets["0.025"], buckets["0.5"], buckets["30.0"]) == (1, 2, 3, 3)
    assert buckets["+Inf"] == data["ticks"] == 4
    assert data["tick_seconds"]["sum"] == round(0.004 + 0.3 + 99.0 + 0.02, 6)
    assert (data["last_tick_s"], data["active_runs"]) == (0.02, 0)


def test_an_unreadable_file_reads_as_nothing(tmp_path: Path) -> None:
    (tmp_path / loop_metrics.FILE).write_text("{torn")
    assert loop_metrics.read(tmp_path) is None
    LoopMetrics(tmp_path / "missing-dir").flush()  # never raises
