"""The tracker interface, the null sink and the composite.

A training loop talks to one :class:`Tracker` and never branches on "is W&B on?". A sink that
fails is logged and skipped by :class:`CompositeTracker`: losing a metric is better than losing
a training run.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from corral.secrets.redact import redact

__all__ = ["CompositeTracker", "NullTracker", "Tracker", "numeric_metrics", "table_columns"]

log = logging.getLogger("corral.sdk.trackers")


class Tracker(ABC):
    """A metrics sink."""

    @abstractmethod
    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Record ``metrics`` (name -> number) at training step ``step``."""

    @abstractmethod
    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Record a table (e.g. the worst samples of an evaluation): one dict per row."""

    def finish(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Flush and close; the tracker is not used afterwards."""

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


class NullTracker(Tracker):
    """Accepts everything, records nothing."""

    def log(self, metrics: dict[str, Any], step: int) -> None:
        return None

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        return None

    def __repr__(self) -> str:
        return "NullTracker()"


class CompositeTracker(Tracker):
    """Sends every call to each of its trackers; one failing sink never stops the others."""

    def __init__(self, trackers: Iterable[Tracker] = ()):
        self.trackers: list[Tracker] = list(trackers)
        self._warned: set[int] = set()

    def add(self, tracker: Tracker) -> None:
        self.trackers.append(tracker)

    def _each(self, what: str, call: Any) -> None:
        for tracker in list(self.trackers):
            try:
                call(tracker)
            except Exception as e:
                key = id(tracker)
                level = logging.DEBUG if key in self._warned else logging.WARNING
                self._warned.add(key)
                log.log(
                    level,
                    "tracker %r failed to %s: %s: %s",
                    tracker,
                    what,
                    type(e).__name__,
                    redact(str(e)),
                )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._each("log", lambda t: t.log(metrics, step))

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        self._each("log a table", lambda t: t.log_table(name, rows, step))

    def finish(self) -> None:
        self._each("finish", lambda t: t.finish())

    def __repr__(self) -> str:
        return f"CompositeTracker({self.trackers!r})"


def numeric_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The entries of ``metrics`` that are numbers (numpy/torch scalars included), as floats;
    NaN and infinities are kept (a diverging loss is worth seeing)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if hasattr(value, "item") and callable(value.item):
            try:
                value = value.item()
            except Exception:
                continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[str(key)] = float(value)
    return out


def table_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Column names in first-seen order over all rows."""
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    return columns
