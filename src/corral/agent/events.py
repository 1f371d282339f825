"""The agent's event log: a dense, ordered list of what happened, also appended to a file.

``seq`` starts at 1 and has no gaps. Every event is appended to ``events.jsonl`` as it is
recorded, so a reader that restarts (or the local provider, if the agent died) can read them
back. An agent started on a state directory that already holds an event file continues its
numbering, so the file stays one dense sequence.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.agent.diskfull import DiskGuard
from corral.wire.node import iso

EVENT_TYPES = frozenset(
    {
        "attempt.started",
        "setup.started",
        "setup.finished",
        "stage.started",
        "stage.waiting",
        "stage.finished",
        "stage.skipped",
        "progress",
        "checkpoint.saved",
        "attempt.finished",
        "stop.requested",
        "agent.error",  # a hook failed (data: hook, message)
        "checkpoint.uploaded",  # a complete checkpoint is in object storage (data: step, uri)
        "checkpoint.restored",  # restored from object storage at attempt start (data: step, uri)
        "checkpoint.skipped",  # corrupt: not restored/uploaded (data: step, name, uri, reason)
        "checkpoint.warning",  # storage set, nothing recognised at the path (data: message)
        "artifacts.uploaded",  # data: uri, files, bytes
        "manifest.written",  # data: uri
        "eval.acceptance",  # data: criteria [{metric, op, value, observed, passed}], all_pass
        "code.ready",  # the code is in place (data: source, sha256, bytes, commit, seconds)
        "mount.downloaded",  # data: source, path, files, bytes, cached_files
        "mount.uploaded",  # data: source, path, files, bytes
        "node.info",  # what the node is (data: provider, machine_id, instance_id, ...)
        "gang.started",  # every node of the gang is there: its stages on several nodes start
    }
)


def read_events_file(path: str | Path) -> list[dict[str, Any]]:
    """The events recorded in ``path`` (a torn last line is ignored)."""
    out: list[dict[str, Any]] = []
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("seq"), int):
            out.append(event)
    return out


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return True
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def _dense_prefix(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, event in enumerate(events):
        if event["seq"] != i + 1:
            return events[:i]
    return events


class EventLog:
    """``mask``: applied to every event's data before it is kept or written (the agent masks
    its job's secret values, so neither the API nor the file on the node holds one).

    ``disk``: what the agent's writers share about a full disk. An event the file cannot take
    (``ENOSPC``) is kept in memory (the API serves it) and written, in order, once there is
    room: the file stays one dense sequence and :meth:`emit` never raises on a full disk."""

    def __init__(
        self,
        path: str | Path,
        now: Callable[[], float] = time.time,
        mask: Callable[[Any], Any] | None = None,
        disk: DiskGuard | None = None,
    ):
        self._path = Path(path)
        self._now = now
        self._mask = mask
        self.disk = disk or DiskGuard()
        #: lines not yet in the file (it was full), oldest first
        self._unwritten: list[str] = []
        self._lock = threading.Lock()
        self._events = _dense_prefix(read_events_file(self._path))
        self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the log
        #: called with each event once it is recorded (the bell: ``agent.bell``); never raise
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        if not _ends_with_newline(self._path):
            self._file.write("\n")  # end a torn last line so the next event starts clean

    def emit(
        self,
        type: str,
        stage: str | None = None,
        data: dict[str, Any] | None = None,
        *,
        announce: bool = True,
    ) -> dict:
        """Record an event; the listeners are told at once, or (``announce=False``) when the
        caller calls :meth:`announce`, once what the event says can be seen elsewhere (the
        attempt's end: the event first, for whoever sees the end in ``GET /status``, and the
        bell after the status, for whoever looks when it rings)."""
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}")
        with self._lock:
            seq = self._events[-1]["seq"] + 1 if self._events else 1
            event = {"seq": seq, "ts": iso(self._now()), "type": type, "stage": stage}
            event["data"] = dict(self._mask(data or {}) if self._mask else data or {})
            self._events.append(event)
            self._unwritten.append(json.dumps(event, separators=(",", ":")) + "\n")
            self._write_pending()
        if announce:
            self.announce(event)
        return event

    def announce(self, event: dict[str, Any]) -> None:
        """Tell the listeners of ``event`` (recorded by :meth:`emit`)."""
        for listener in self.listeners:
            listener(event)

    def _write_pending(self) -> None:
        """Write the lines the file does not hold yet (under the lock). A full disk keeps them
        for the next event; a line is never written twice or torn into the next one."""
        if self._file.closed:
            return
        while self._unwritten:
            line = self._unwritten[0]
            try:
                self._file.write(line)
                self._file.flush()
            except OSError as exc:
                self.disk.note(exc, "the agent's event file")
                self._reopen()
                return
            self._unwritten.pop(0)

    def _reopen(self) -> None:
        """After a failed write the file object may hold a part of the line in its buffer:
        drop it, cut the file back to its last whole line, and append from there."""
        try:
            self._file.close()
        except OSError:
            pass
        try:
            with open(self._path, "rb+") as f:
                data = f.read()
                f.truncate(data.rfind(b"\n") + 1)
        except OSError:
            pass
        self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the log

    def after(self, after: int = 0, limit: int = 1000) -> tuple[list[dict], int]:
        """Events with ``seq > after`` (at most ``limit``) and the ``after`` for the next call."""
        with self._lock:
            # seq is dense from the first event, so the position is arithmetic.
            first = self._events[0]["seq"] if self._events else 1
            start = max(0, after - first + 1)
            page = [dict(e) for e in self._events[start : start + limit]]
            newest = self._events[-1]["seq"] if self._events else 0
        # ``next`` never passes the newest event, so a reader ahead of this log catches up.
        return page, (page[-1]["seq"] if page else min(max(after, 0), newest))

    def types(self) -> list[str]:
        with self._lock:
            return [e["type"] for e in self._events]

    def close(self) -> None:
        with self._lock:
            self._file.close()
