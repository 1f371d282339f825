"""Tails the stages' progress files (JSON lines the SDK appends, see ``corral.sdk.progress_file``).

Keeps the latest progress of every stage for ``/status``, turns ``checkpoint`` records into
``checkpoint.saved`` events, and ``progress`` records into at most one ``progress`` event per
stage every ``interval`` seconds. A partial last line is kept until its newline arrives; lines
that are not valid records are skipped.
"""

from __future__ import annotations

import copy
import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from corral.agent.events import EventLog

POLL_SECONDS = 0.5
_READ_MAX = 1024 * 1024


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ProgressTailer:
    def __init__(
        self,
        directory: str | Path,
        events: EventLog,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.directory = Path(directory)
        self._events = events
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self._last_event_at: dict[str, float] = {}
        self._last_checkpoint: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def path_for(self, stage: str) -> Path:
        return self.directory / f"{stage}.jsonl"

    # --- reading -------------------------------------------------------------------------

    def poll(self, stages: Iterable[str]) -> None:
        """Read what was appended to the given stages' files since the last poll."""
        with self._lock:
            for stage in stages:
                self._poll_one(stage)

    def _poll_one(self, stage: str) -> None:
        path = self.path_for(stage)
        offset = self._offsets.get(stage, 0)
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                if f.tell() < offset:  # truncated or replaced: start over
                    offset, self._partial[stage] = 0, b""
                f.seek(offset)
                data = f.read(_READ_MAX)
        except FileNotFoundError:
            return
        if not data:
            return
        self._offsets[stage] = offset + len(data)
        *lines, self._partial[stage] = (self._partial.get(stage, b"") + data).split(b"\n")
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self._handle(stage, record)

    def _handle(self, stage: str, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        ts = _number(record.get("ts"))
        step = _number(record.get("step"))
        metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
        if kind == "progress" and step is not None:
            total = _number(record.get("total"))
            latest = {
                "step": step,
                "total": total,
                "percent": round(100.0 * step / total, 2) if total else None,
                "loss": _number(record.get("loss")),
                "ts": ts,
                "metrics": dict(metrics),
            }
            if _number(record.get("epoch")) is not None:
                latest["epoch"] = record["epoch"]
            self._latest[stage] = latest
            now = self._clock()
            last = self._last_event_at.get(stage)
            if last is None or now - last >= self._interval:
                self._last_event_at[stage] = now
                data = {k: latest[k] for k in ("step", "total", "percent", "loss", "metrics")}
                self._events.emit("progress", stage=stage, data=data)
        elif kind == "metrics":
            latest = self._latest.setdefault(
                stage,
                {
                    "step": step,
                    "total": None,
                    "percent": None,
                    "loss": None,
                    "ts": ts,
                    "metrics": {},
                },
            )
            latest["metrics"] = {**latest.get("metrics", {}), **metrics}
            latest["ts"] = ts
        elif kind == "checkpoint" and step is not None and isinstance(record.get("path"), str):
            self._last_checkpoint = {"stage": stage, "step": step, "path": record["path"], "ts": ts}
            data = {"step": step, "path": record["path"], "metrics": dict(metrics)}
            self._events.emit("checkpoint.saved", stage=stage, data=data)

    # --- state ---------------------------------------------------------------------------

    def latest(self, stage: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._latest.get(stage)
            return copy.deepcopy(found)

    def last_checkpoint(self) -> dict[str, Any] | None:
        with self._lock:
            return dict(self._last_checkpoint) if self._last_checkpoint else None

    # --- background polling ----------------------------------------------------------------

    def start(self, stages: Callable[[], Iterable[str]], every: float = POLL_SECONDS) -> None:
        """Poll ``stages()`` every ``every`` seconds on a daemon thread until :meth:`close`."""

        def loop() -> None:
            while not self._stop.wait(every):
                self.poll(stages())

        self._thread = threading.Thread(target=loop, name="progress-tail", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
