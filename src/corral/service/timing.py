"""How long a run has run (kept free of pydantic: the CLI's text output imports it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Timed(Protocol):
    """Anything with a run's start and end times (a store record, a view)."""

    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


def run_duration(run: Timed, now: datetime | None = None) -> float | None:
    """Seconds the run has been running (until it finished, else until ``now``); None before
    it started."""
    if run.started_at is None:
        return None
    end = run.finished_at or now or datetime.now(UTC)
    return (end - run.started_at).total_seconds()
