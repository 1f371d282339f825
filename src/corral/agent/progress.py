"""Tails the stages' progress files (JSON lines the SDK appends, see ``corral.sdk.progress_file``).

Keeps the latest progress of every stage for ``/status``, turns ``checkpoint`` records into
``checkpoint.saved`` events, and ``progress`` records into at most one ``progress`` event per
stage every ``interval`` seconds. A partial last line is kept until its newline arrives; lines
that are not valid records (or that the tailer fails on) are skipped.

Every poll reads what was appended up to the file's size at that moment (in chunks, releasing
the lock between them), so the poll after a stage exits sees everything it wrote. A file that
was truncated or replaced (another inode, or other first bytes) is read again from its start.
Files already in the directory when the tailer starts (an agent restarted on its
``state_dir``) are read from their end: their records were handled by the earlier agent.

Non-finite numbers are the strings ``"nan"``, ``"inf"`` and ``"-inf"`` (what the SDK writes;
``NaN``/``Infinity`` tokens from other writers are turned into them too), so ``/status`` stays
strict JSON and a diverged loss is not shown as "no loss"; the ``progress`` event (and its
webhook) carries the same ``loss``. ``progress.metrics`` holds the latest
value of every metric from ``progress`` and ``metrics`` records, at most ``MAX_METRICS`` keys
(the most recently reported are kept).

No validation value is lost to that throttle: the validation metrics
(``corral.wire.metric_names``: ``val_*``, ``eval_*``, ``test_*``) of a ``progress`` record that
made no event and of every ``metrics`` record (an evaluation's) wait as ``[step, {name:
value}]`` pairs and go out as ``points`` on the stage's next ``progress`` event, or on one made
for them when the stage ends (:meth:`ProgressTailer.flush`); at most ``MAX_UNSENT`` of them
wait per stage (the oldest are dropped). Training metrics reported every step (``lr``,
``tok/sec``) are not kept: the events sample them.

The ETA (``eta_s``, seconds to ``total``) is worked out from the progress records themselves:
the rate (``steps_per_s``) is the steps made over the span of the stage's records of the last
``ETA_WINDOW_S`` seconds (their ``ts``, the job's clock; the record just before the window is
kept as the span's start, so slow steps still give a rate), so a job that speeds up or slows
down shows it within that window. No rate before two records, no ETA without a ``total``; a
step going backwards (a resumed attempt) starts the window again.
"""

from __future__ import annotations

import copy
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from corral.agent.events import EventLog
from corral.wire.metric_names import is_validation

POLL_SECONDS = 0.5
_READ_MAX = 1024 * 1024
#: A line longer than this is dropped (up to its newline) instead of held in memory.
MAX_LINE = 16 * 1024 * 1024
#: Keys kept in a stage's ``progress.metrics`` (the most recently reported).
MAX_METRICS = 256
_HEAD = 64
#: The validation reports that wait per stage for the next ``progress`` event (the newest kept).
MAX_UNSENT = 500
#: The ETA's rate is measured over the progress records of this many seconds.
ETA_WINDOW_S = 120.0
_NON_FINITE = ("nan", "inf", "-inf")
_RECORD_START = b'{"ts":'


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _strict(value: Any) -> Any:
    """``value`` with non-finite floats as ``"nan"``/``"inf"``/``"-inf"`` (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


def _loss(value: Any) -> float | int | str | None:
    """A finite number, ``"nan"``, ``"inf"``, ``"-inf"``, or None (no loss reported)."""
    value = _strict(value)
    if isinstance(value, str):
        return value if value in _NON_FINITE else None
    return _number(value)


class _Rate:
    """Steps per second over the recent progress records of one stage (see the module doc)."""

    def __init__(self, window_s: float = ETA_WINDOW_S):
        self.window_s = window_s
        self._points: deque[tuple[float, float]] = deque()

    def add(self, ts: float | int | None, step: float | int) -> float | None:
        if ts is None:
            return self.rate()
        points = self._points
        if points and (step < points[-1][1] or ts < points[-1][0]):
            points.clear()  # resumed from an earlier step, or another clock: start again
        points.append((float(ts), float(step)))
        while len(points) > 2 and points[1][0] <= ts - self.window_s:
            points.popleft()
        return self.rate()

    def rate(self) -> float | None:
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)


def eta_seconds(step: float | int, total: float | int | None, rate: float | None) -> float | None:
    """Seconds until ``step`` reaches ``total`` at ``rate`` steps/s (0 once it is there), or
    None when the total or the rate is unknown."""
    if total is None or total <= 0:
        return None
    if step >= total:
        return 0.0
    if not rate or rate <= 0:
        return None
    try:
        return round((total - step) / rate, 1)
    except OverflowError:
        return None


def _percent(step: float | int, total: float | int | None) -> float | None:
    if total is None or total <= 0:
        return None
    try:
        return round(100.0 * step / total, 2)
    except (OverflowError, ZeroDivisionError):
        return None


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
        self._read_lock = threading.Lock()  # one poll at a time; _lock guards the state
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}
        self._skipping: dict[str, bool] = {}  # dropping an over-long line up to its newline
        self._identity: dict[str, tuple[int, int, bytes]] = {}  # (st_dev, st_ino, first bytes)
        self._latest: dict[str, dict[str, Any]] = {}
        self._last_event_at: dict[str, float] = {}
        #: per stage: [step, metrics] reported since its last progress event and not in one
        self._unsent: dict[str, deque[list[Any]]] = {}
        self._last_checkpoint: dict[str, Any] | None = None
        self._rates: dict[str, _Rate] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._skip_existing()

    def _skip_existing(self) -> None:
        """Files an earlier agent on this ``state_dir`` left: their records were handled (and
        their events written) then, so only what is appended from now on is read."""
        try:
            paths = list(self.directory.glob("*.jsonl"))
        except OSError:
            return
        for path in paths:
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    head = f.read(_HEAD)
            except OSError:
                continue
            stage = path.name[: -len(".jsonl")]
            self._identity[stage] = (st.st_dev, st.st_ino, head)
            self._offsets[stage] = st.st_size

    def path_for(self, stage: str) -> Path:
        return self.directory / f"{stage}.jsonl"

    # --- reading -------------------------------------------------------------------------

    def poll(self, stages: Iterable[str]) -> None:
        """Read what was appended to the given stages' files since the last poll."""
        with self._read_lock:
            for stage in stages:
                try:
                    self._poll_one(stage)
                except Exception:  # one bad file or record never stops the tailing
                    pass

    def _poll_one(self, stage: str) -> None:
        try:
            with open(self.path_for(stage), "rb") as f:
                self._read(stage, f)
        except FileNotFoundError:
            return

    def _read(self, stage: str, f: BinaryIO) -> None:
        st = os.fstat(f.fileno())
        offset = self._offsets.get(stage, 0)
        known = self._identity.get(stage)
        head = f.read(_HEAD)
        if known is not None and (
            (known[0], known[1]) != (st.st_dev, st.st_ino)
            or head[: len(known[2])] != known[2]
            or st.st_size < offset
        ):  # truncated or replaced: start over
            offset = 0
        if offset == 0:
            self._partial[stage], self._skipping[stage] = b"", False
        self._identity[stage] = (st.st_dev, st.st_ino, head)
        self._offsets[stage] = offset
        end = st.st_size  # what was there when the poll began: a busy writer cannot stall it
        f.seek(offset)
        while offset < end:
            data = f.read(min(_READ_MAX, end - offset))
            if not data:
                break
            offset += len(data)
            self._offsets[stage] = offset
            lines = self._split(stage, data)
            with self._lock:
                for line in lines:
                    self._line(stage, line)

    def _split(self, stage: str, data: bytes) -> list[bytes]:
        *lines, partial = (self._partial.get(stage, b"") + data).split(b"\n")
        if lines and self._skipping.get(stage):
            lines, self._skipping[stage] = lines[1:], False  # the rest of the over-long line
        if len(partial) > MAX_LINE:
            partial, self._skipping[stage] = b"", True
        self._partial[stage] = partial
        return lines

    def _line(self, stage: str, line: bytes) -> None:
        try:
            try:
                record = json.loads(line)
            except ValueError:
                # a writer killed mid-line leaves a torn start that the next record completes:
                # the SDK's records begin with {"ts":, so the last one in the line may be whole
                start = line.rfind(_RECORD_START)
                if start <= 0:
                    return
                record = json.loads(line[start:])
            if isinstance(record, dict):
                self._handle(stage, record)
        except Exception:  # not JSON, or a record the handler cannot take: skipped
            pass

    def _handle(self, stage: str, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        ts = _number(record.get("ts"))
        step = _number(record.get("step"))
        raw_metrics = record.get("metrics")
        metrics: dict[str, Any] = _strict(raw_metrics) if isinstance(raw_metrics, dict) else {}
        if kind == "progress" and step is not None:
            total = _number(record.get("total"))
            previous = self._latest.get(stage) or {}
            rate = self._rates.setdefault(stage, _Rate()).add(ts, step)
            eta = eta_seconds(step, total, rate)
            latest = {
                "step": step,
                "total": total,
                "percent": _percent(step, total),
                "loss": _loss(record.get("loss")),
                "ts": ts,
                "metrics": _merge(previous.get("metrics") or {}, metrics),
                "steps_per_s": None if rate is None else round(rate, 4),
                "eta_s": eta,
            }
            if _number(record.get("epoch")) is not None:
                latest["epoch"] = record["epoch"]
            self._latest[stage] = latest
            now = self._clock()
            last = self._last_event_at.get(stage)
            if last is None or now - last >= self._interval:
                self._last_event_at[stage] = now
                loss = latest["loss"]
                data = {
                    "step": step,
                    "total": total,
                    "percent": latest["percent"],
                    "loss": loss,
                    "metrics": metrics,
                    "steps_per_s": latest["steps_per_s"],
                    "eta_s": eta,
                }
                self._emit(stage, data)
            elif metrics:
                self._hold(stage, step, metrics)
        elif kind == "metrics":
            if step is not None and metrics:
                self._hold(stage, step, metrics)
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
            old = latest.get("metrics")
            latest["metrics"] = _merge(old if isinstance(old, dict) else {}, metrics)
            latest["ts"] = ts
        elif kind == "checkpoint" and step is not None and isinstance(record.get("path"), str):
            self._last_checkpoint = {"stage": stage, "step": step, "path": record["path"], "ts": ts}
            data = {"step": step, "path": record["path"], "metrics": metrics}
            shards = _number(record.get("shards"))
            if isinstance(shards, int) and shards >= 1:  # a sharded checkpoint: its rank count
                self._last_checkpoint["shards"] = data["shards"] = shards
            self._events.emit("checkpoint.saved", stage=stage, data=data)

    def _hold(self, stage: str, step: float | int, metrics: dict[str, Any]) -> None:
        kept = {k: v for k, v in metrics.items() if is_validation(str(k))}
        if kept:
            unsent = self._unsent.setdefault(stage, deque(maxlen=MAX_UNSENT))
            unsent.append([step, kept])

    def _emit(self, stage: str, data: dict[str, Any]) -> None:
        """A ``progress`` event, with the metric reports that waited for it as ``points``."""
        unsent = self._unsent.pop(stage, None)
        if unsent:
            data["points"] = list(unsent)
        self._events.emit("progress", stage=stage, data=data)

    def flush(self, stage: str) -> None:
        """A last ``progress`` event for the stage's metric reports that no event carried yet
        (the stage ended before the next one was due); none when nothing waits."""
        with self._lock:
            latest = self._latest.get(stage)
            if not self._unsent.get(stage) or latest is None:
                return
            self._last_event_at[stage] = self._clock()
            data: dict[str, Any] = {
                "step": latest.get("step"),
                "total": latest.get("total"),
                "percent": latest.get("percent"),
                "loss": latest.get("loss"),
                "metrics": {},
                "steps_per_s": latest.get("steps_per_s"),
                "eta_s": latest.get("eta_s"),
            }
            self._emit(stage, data)

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
                try:
                    self.poll(stages())
                except Exception:  # e.g. stages() failing once: try again at the next tick
                    pass

        self._thread = threading.Thread(target=loop, name="progress-tail", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` updated with ``new``; the ``MAX_METRICS`` most recently reported keys."""
    merged = {k: v for k, v in old.items() if k not in new}
    merged.update(new)
    if len(merged) > MAX_METRICS:
        merged = dict(list(merged.items())[-MAX_METRICS:])
    return merged
