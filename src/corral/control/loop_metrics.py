"""What the controller measures of its own loop, published for monitoring (``/metrics`` of
``corral server``): how long each look at one run took (a "tick": the controller looks at
each run on its own schedule, ``control.schedule``), as a cumulative histogram, and how many
runs were active at the last one.

The controller writes ``CORRAL_HOME/controller-metrics.json`` (atomically, at most every
:data:`FLUSH_S` seconds and when it exits); a server on the same home reads it. Counts are
those of the controller process that wrote the file (``pid``, ``started_at``): a new controller
starts again from zero, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.files import write_atomic

FILE = "controller-metrics.json"
#: seconds between two writes of the file
FLUSH_S = 5.0
#: upper bounds (seconds) of the tick-duration histogram's buckets (+Inf is implied)
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class LoopMetrics:
    """Tick durations and the active-run count of one controller process."""

    def __init__(
        self,
        home: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        flush_s: float = FLUSH_S,
    ):
        self.path = home / FILE
        self._clock, self._wall, self._flush_s = clock, wall, flush_s
        self._started_at = wall()
        self._counts = [0] * (len(BUCKETS) + 1)  # per bucket (not cumulative); last: +Inf
        self._sum = 0.0
        self._count = 0
        self._last_s = 0.0
        self._active = 0
        self._flushed_at: float | None = None

    def observe(self, seconds: float, active_runs: int) -> None:
        """One tick took ``seconds`` over ``active_runs`` runs; write the file when due."""
        seconds = max(0.0, float(seconds))
        i = next((i for i, le in enumerate(BUCKETS) if seconds <= le), len(BUCKETS))
        self._counts[i] += 1
        self._sum += seconds
        self._count += 1
        self._last_s = seconds
        self._active = int(active_runs)
        now = self._clock()
        if self._flushed_at is None or now - self._flushed_at >= self._flush_s:
            self.flush()

    def snapshot(self) -> dict[str, Any]:
        cumulative, total = [], 0
        for le, n in zip((*BUCKETS, float("inf")), self._counts, strict=True):
            total += n
            cumulative.append(["+Inf" if le == float("inf") else le, total])
        return {
            "pid": os.getpid(),
            "started_at": self._started_at,
            "updated_at": self._wall(),
            "ticks": self._count,
            "tick_seconds": {"buckets": cumulative, "sum": round(self._sum, 6)},
            "last_tick_s": round(self._last_s, 6),
            "active_runs": self._active,
        }

    def flush(self) -> None:
        """Write the file now. Never raises: monitoring must not stop the controller."""
        self._flushed_at = self._clock()
        try:
            write_atomic(self.path, json.dumps(self.snapshot()), mode=0o644, fsync=False)
        except OSError:
            pass


def read(home: Path) -> dict[str, Any] | None:
    """What the last controller on ``home`` published, or None (none has, or the file is
    unreadable)."""
    try:
        data = json.loads((home / FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
