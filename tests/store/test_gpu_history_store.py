"""GPU readings in the store (SQLite and PostgreSQL): written at most once per interval per
GPU, read back over a window (every reading, or the means of equal spans when the window is
long), and deleted once older than the retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.store import Store
from corral.store.gpu_history import GpuReading, step_for

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _host(gpu: int, util: float, mem: float, temp: float | None = 40.0) -> GpuReading:
    return GpuReading(
        kind="host", source="box-1", attempt=0, gpu=gpu, uuid=f"GPU-{gpu}", name="L40S",
        memory_total_mb=46068, util_pct=util, mem_used_mb=mem, temp_c=temp,
    )  # fmt: skip


def _node(gpu: int, util: float) -> GpuReading:
    return GpuReading(kind="node", source="train-abc123", attempt=2, gpu=gpu, util_pct=util)


def test_readings_are_written_once_per_interval_and_read_back(store: Store) -> None:
    assert store.record_gpu_readings([_host(0, 10, 1000), _host(1, 20, 2000)], at=T0, every_s=60)
    # 30 s later: both GPUs were read less than a minute ago, nothing is written
    later = T0 + timedelta(seconds=30)
    assert store.record_gpu_readings([_host(0, 99, 9), _host(1, 99, 9)], at=later, every_s=60) == 0
    # a minute later: one row each, and a node's GPU (no temperature, no name) beside them
    t1 = T0 + timedelta(seconds=60)
    readings = [_host(0, 30.4, 1500.6, None), _host(1, 40, 2500), _node(0, 77)]
    assert store.record_gpu_readings(readings, at=t1, every_s=60) == 3
    series = store.gpu_series()
    assert [(s.kind, s.source, s.attempt, s.gpu) for s in series] == [
        ("host", "box-1", 0, 0),
        ("host", "box-1", 0, 1),
        ("node", "train-abc123", 2, 0),
    ]
    assert (series[0].uuid, series[0].name, series[0].memory_total_mb) == ("GPU-0", "L40S", 46068)
    got = store.gpu_history(T0, t1, max_points=300)
    by = {(p.series.source, p.series.gpu): p.points for p in got}
    t = int(T0.timestamp())
    assert by[("box-1", 0)] == [(t, 10.0, 1000.0, 40.0), (t + 60, 30.0, 1501.0, None)]
    assert by[("box-1", 1)] == [(t, 20.0, 2000.0, 40.0), (t + 60, 40.0, 2500.0, 40.0)]
    assert by[("train-abc123", 0)] == [(t + 60, 77.0, None, None)]
    # a window, and only some series
    only = store.gpu_history(t1, t1, series=[series[1].id])
    assert [(p.series.gpu, p.points) for p in only] == [(1, [(t + 60, 40.0, 2500.0, 40.0)])]
    assert store.gpu_history(T0 - timedelta(hours=1), T0 - timedelta(seconds=1)) == []


def test_a_long_window_is_downsampled_to_a_bounded_number_of_points(store: Store) -> None:
    # a day at one reading a minute: 1,440 readings of one GPU, utilisation rising 0 .. 99
    for i in range(1440):
        at = T0 + timedelta(seconds=60 * i)
        assert store.record_gpu_readings([_host(0, i % 100, i)], at=at, every_s=60) == 1
    until = T0 + timedelta(days=1)
    [everything] = store.gpu_history(T0, until, max_points=2000)
    assert len(everything.points) == 1440
    [thin] = store.gpu_history(T0, until, max_points=100)
    assert 90 <= len(thin.points) <= 100
    step = step_for(T0, until, 100)
    assert step == 865  # ceil(86401 / 100) seconds a point
    # each point is the mean of its span's readings, at their mean time
    first = [i for i in range(1440) if 60 * i < step]
    t = int(T0.timestamp())
    assert thin.points[0] == (
        t + round(sum(60 * i for i in first) / len(first)),
        round(sum(i % 100 for i in first) / len(first), 1),
        float(round(sum(first) / len(first))),
        40.0,
    )
    assert [p[0] for p in thin.points] == sorted(p[0] for p in thin.points)


def test_retention_deletes_old_readings_and_the_series_left_empty(store: Store) -> None:
    for day in range(3):
        at = T0 + timedelta(days=day)
        store.record_gpu_readings([_host(0, day, 1)], at=at, every_s=60)
        if day == 0:
            store.record_gpu_readings([_node(0, 50)], at=at, every_s=60)
    # what is older than 12 h after the first readings goes: day 0's, and the node with it
    assert store.prune_gpu_history(T0 + timedelta(hours=12)) == 2
    assert [(s.kind, s.gpu) for s in store.gpu_series()] == [("host", 0)]
    [left] = store.gpu_history(T0, T0 + timedelta(days=3))
    assert [p[1] for p in left.points] == [1.0, 2.0]
    assert store.prune_gpu_history(T0) == 0


def test_out_of_range_values_are_capped_not_refused(store: Store) -> None:
    wild = GpuReading(
        kind="host", source="box-1", attempt=0, gpu=0, util_pct=float("nan"),
        mem_used_mb=1e12, temp_c=1e9, memory_total_mb=2**40,
    )  # fmt: skip
    assert store.record_gpu_readings([wild], at=T0) == 1
    [p] = store.gpu_history(T0, T0)
    assert p.points == [(int(T0.timestamp()), None, float(2**31 - 1), 32767.0)]
