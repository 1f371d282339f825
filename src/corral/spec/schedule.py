"""Cron schedules of a job spec (``schedule:``): the model and when its ticks fall.

``cron`` is a standard five-field expression (``"0 2 * * *"``: 02:00 every day), a
``@daily``-style shortcut, or six fields with seconds first (``"*/10 * * * * *"``: every ten
seconds, for demos and tests). Ticks are computed in ``timezone`` (an IANA name, default UTC),
so ``0 2 * * *`` in ``Europe/Berlin`` stays at 02:00 local time across daylight saving.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field

from corral.spec.fields import Label
from corral.spec.models import SpecModel

#: what a controller does with ticks that passed while nothing ran: start nothing for them,
#: or start one run for all of them
MISSED_POLICIES = ("skip", "run-once")
#: a tick this late (seconds) counts as missed; before that it is simply on time
ON_TIME_S = 60.0
#: the most ticks looked at in one go (a schedule firing every second, down for a day)
MAX_TICKS = 10_000


def _fields(expr: str) -> int:
    return 0 if expr.startswith("@") else len(expr.split())


def _iter(expr: str, tz: str, start: datetime) -> object:
    from croniter import croniter

    return croniter(expr, start.astimezone(ZoneInfo(tz)), second_at_beginning=_fields(expr) == 6)


def _check_cron(value: str) -> str:
    from croniter import croniter

    expr = " ".join(value.split())
    n = _fields(expr)
    if n not in (0, 5, 6) or not croniter.is_valid(expr, second_at_beginning=n == 6):
        raise ValueError(
            f"{value!r} is not a cron expression: use 5 fields 'minute hour day month weekday' "
            "(e.g. '0 2 * * *'), a shortcut such as '@daily', or 6 fields with seconds first"
        )
    return expr


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {value!r}: use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None
    return value


class Schedule(SpecModel):
    """Start this job on a cron schedule (register it with `corral schedule add FILE`)."""

    cron: Annotated[str, AfterValidator(_check_cron), Label("cron expression")] = Field(
        description="When: 'minute hour day month weekday' ('0 2 * * *' is 02:00 daily), a "
        "shortcut ('@hourly', '@daily', '@weekly'), or 6 fields with seconds first."
    )
    timezone: Annotated[str, AfterValidator(_check_timezone), Label("IANA time zone")] = Field(
        "UTC", description="The time zone of the cron fields, e.g. 'Europe/Berlin'."
    )
    missed: Literal["skip", "run-once"] = Field(
        "skip",
        description="Ticks missed while no controller ran: 'skip' starts nothing for them, "
        "'run-once' starts one run for all of them.",
    )

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (UTC)."""
        return next(ticks(self.cron, self.timezone, moment))


def ticks(cron: str, tz: str, after: datetime) -> Iterator[datetime]:
    """The ticks of ``cron`` in ``tz`` strictly after ``after``, as UTC datetimes."""
    it = _iter(cron, tz, after)
    while True:
        yield it.get_next(datetime).astimezone(UTC)  # type: ignore[attr-defined]
