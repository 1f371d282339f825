"""A tracker that records what it is given (a test double for the Tracker interface)."""

from __future__ import annotations

from typing import Any

from corral.sdk.trackers import Tracker


class RecordingTracker(Tracker):
    def __init__(self, fail: bool = False):
        self.metrics: list[tuple[dict[str, Any], int]] = []
        self.tables: list[tuple[str, list[dict[str, Any]], int]] = []
        self.finished = 0
        self.fail = fail

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.fail:
            raise ConnectionError("sink down")
        self.metrics.append((dict(metrics), step))

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        if self.fail:
            raise ConnectionError("sink down")
        self.tables.append((name, rows, step))

    def finish(self) -> None:
        self.finished += 1
