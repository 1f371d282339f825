"""GPU readings kept as a time series (the controller's sampler writes them, ``GET
/api/v1/monitoring/gpu/history`` and the dashboard's GPU page read them).

Two tables (revision 0008): ``gpu_series``, one row per GPU of one place (this controller's
machine, or a run's node: one per attempt), and ``gpu_readings``, one row of integers per
reading keyed by (series, unix second). A write keeps at most one reading per series in any
``every_s`` seconds, whatever the number of controllers writing (:meth:`GpuHistoryOps.
record_gpu_readings`); a read answers at most ``max_points`` points per series, the means of
equal spans of the window (:meth:`GpuHistoryOps.gpu_history`); :meth:`GpuHistoryOps.
prune_gpu_history` deletes what is older than the retention, and the series left empty.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from corral.store._core import StoreBase, aware_utc
from corral.store.records import _Record

HOST = "host"
NODE = "node"
_SERIES = "id, kind, source, attempt, gpu, uuid, name, memory_total_mb"
#: the largest value each reading column holds (SMALLINT, INTEGER): larger ones are capped
_SMALL = 32767
_INT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's reading, to record: where (``kind`` host: ``source`` the host name and
    ``attempt`` 0; ``kind`` node: ``source`` the run's id, ``attempt`` its number), which GPU,
    and what it reads (None: not reported)."""

    kind: str
    source: str
    attempt: int
    gpu: int
    uuid: str = ""
    name: str = ""
    memory_total_mb: int | None = None
    util_pct: float | None = None
    mem_used_mb: float | None = None
    temp_c: float | None = None


@dataclass(frozen=True, slots=True)
class GpuSeriesRecord(_Record):
    id: int
    kind: str
    source: str
    attempt: int
    gpu: int
    uuid: str
    name: str
    memory_total_mb: int | None


#: one point: (unix seconds, utilisation %, memory used MB, temperature °C), None where the
#: span's readings reported none
Point = tuple[int, float | None, float | None, float | None]


@dataclass(frozen=True, slots=True)
class GpuPoints:
    series: GpuSeriesRecord
    points: list[Point]


def _bounded(value: float | None, top: int) -> int | None:
    if value is None or not math.isfinite(value):
        return None
    return max(-top, min(top, round(value)))


def _unix(value: datetime) -> int:
    return math.floor(aware_utc(value).timestamp())


def _mean(value: Any, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def step_for(since: datetime, until: datetime, max_points: int) -> int:
    """The seconds each point of a window stands for: 1 (every reading) up to the width that
    keeps the window to ``max_points`` points."""
    span = max(0, _unix(until) - _unix(since))
    return max(1, math.ceil((span + 1) / max(1, max_points)))


class GpuHistoryOps(StoreBase):
    def record_gpu_readings(
        self, readings: Iterable[GpuReading], *, at: datetime, every_s: float = 0.0
    ) -> int:
        """Record ``readings`` as taken at ``at``, one transaction; a GPU that has a reading
        less than ``every_s`` seconds older is left out (another controller, or a restarted
        one, recorded it already). Returns how many rows were written."""
        t = _unix(at)
        after = math.floor(t - max(0.0, every_s)) if every_s > 0 else t - 1
        written = 0
        upsert = (
            "INSERT INTO gpu_series (kind, source, attempt, gpu, uuid, name, memory_total_mb) "
            "VALUES (:kind, :source, :attempt, :gpu, :uuid, :name, :total) "
            "ON CONFLICT (kind, source, attempt, gpu) DO UPDATE SET uuid = excluded.uuid, "
            "name = excluded.name, memory_total_mb = excluded.memory_total_mb RETURNING id"
        )
        insert = (
            "INSERT INTO gpu_readings (series, t, util, mem_mb, temp_c) "
            "SELECT CAST(:series AS INTEGER), CAST(:t AS BIGINT), CAST(:util AS SMALLINT), "
            "CAST(:mem AS INTEGER), CAST(:temp AS SMALLINT) "
            "WHERE NOT EXISTS (SELECT 1 FROM gpu_readings "
            "WHERE series = CAST(:series AS INTEGER) AND t > CAST(:after AS BIGINT)) "
            "ON CONFLICT (series, t) DO NOTHING"
        )
        with self._db.transaction(write=True) as tx:
            for r in readings:
                row = tx.one(
                    upsert,
                    {
                        "kind": r.kind,
                        "source": r.source,
                        "attempt": int(r.attempt),
                        "gpu": int(r.gpu),
                        "uuid": r.uuid or "",
                        "name": r.name or "",
                        "total": _bounded(r.memory_total_mb, _INT),
                    },
                )
                assert row is not None
                written += max(
                    0,
                    tx.run(
                        insert,
                        {
                            "series": int(row["id"]),
                            "t": t,
                            "after": after,
                            "util": _bounded(r.util_pct, _SMALL),
                            "mem": _bounded(r.mem_used_mb, _INT),
                            "temp": _bounded(r.temp_c, _SMALL),
                        },
                    ),
                )
        return written

    def gpu_series(self) -> list[GpuSeriesRecord]:
        """Every series that has readings (or had, until the next prune)."""
        sql = f"SELECT {_SERIES} FROM gpu_series ORDER BY kind, source, attempt, gpu"
        with self._db.transaction() as tx:
            return [GpuSeriesRecord(*row) for row in tx.tuples(sql)]

    def gpu_history(
        self,
        since: datetime,
        until: datetime,
        *,
        series: Iterable[int] | None = None,
        max_points: int = 300,
    ) -> list[GpuPoints]:
        """The readings from ``since`` to ``until`` (both included) of each series (``series``:
        those ids only) that has any, oldest first: every reading when the window holds no
        more than ``max_points`` spans of :func:`step_for` seconds, else one point per span
        (the means of its readings, at their mean time)."""
        lo, hi = _unix(since), _unix(until)
        width = step_for(since, until, max_points)
        wanted = None if series is None else set(series)
        sql = (
            "SELECT AVG(t), AVG(util), AVG(mem_mb), AVG(temp_c) FROM gpu_readings "
            "WHERE series = :series AND t >= CAST(:lo AS BIGINT) AND t <= CAST(:hi AS BIGINT) "
            "GROUP BY (t - CAST(:lo AS BIGINT)) / CAST(:width AS BIGINT) ORDER BY MIN(t)"
        )
        out: list[GpuPoints] = []
        with self._db.transaction() as tx:
            found = [
                GpuSeriesRecord(*row)
                for row in tx.tuples(
                    f"SELECT {_SERIES} FROM gpu_series ORDER BY kind, source, attempt, gpu"
                )
            ]
            for s in found:
                if wanted is not None and s.id not in wanted:
                    continue
                rows = tx.tuples(sql, {"series": s.id, "lo": lo, "hi": hi, "width": width})
                if rows:
                    points: list[Point] = [
                        (round(float(t)), _mean(u, 1), _mean(m, 0), _mean(c, 1))
                        for t, u, m, c in rows
                    ]
                    out.append(GpuPoints(s, points))
        return out

    def prune_gpu_history(self, before: datetime) -> int:
        """Delete the readings older than ``before``, and the series left without any;
        returns how many readings went."""
        cut = _unix(before)
        deleted = 0
        with self._db.transaction(write=True) as tx:
            ids = [int(i) for (i,) in tx.tuples("SELECT id FROM gpu_series")]
            for sid in ids:  # each a range of the primary key: no scan of the whole table
                deleted += max(
                    0,
                    tx.run(
                        "DELETE FROM gpu_readings WHERE series = :s AND t < CAST(:cut AS BIGINT)",
                        {"s": sid, "cut": cut},
                    ),
                )
            tx.run(
                "DELETE FROM gpu_series WHERE NOT EXISTS "
                "(SELECT 1 FROM gpu_readings r WHERE r.series = gpu_series.id)"
            )
        return deleted
