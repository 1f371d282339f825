"""How old the prices behind some offers are: a provider whose offers come from a price catalog
written down more than :data:`MAX_AGE_DAYS` days ago gets a warning (``corral offers`` and
``corral estimate`` show it; their JSON carries it as ``stale_prices``).

An offer's ``catalog_date`` is the date (or time) its price data was written down or fetched;
live prices are minutes old and never stale, simulated ones (not a date) are ignored. The
clock is injected (``today``), so a test can stand at any date.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime

from corral.providers.base import Offer
from corral.service.views import View

MAX_AGE_DAYS = 60


def utc_today() -> date:
    return datetime.now(UTC).date()


#: the service's clock (tests pass ``today=`` or replace this)
today_fn: Callable[[], date] = utc_today


class StalePrices(View):
    """One provider whose offers are priced from data older than the limit."""

    provider: str
    catalog_date: str
    age_days: int
    message: str


def _day(text: str | None) -> date | None:
    if not text:
        return None
    try:
        return date.fromisoformat(text[:10])
    except ValueError:
        return None  # "simulated", say


def stale_prices(
    offers: Iterable[Offer], today: date | None = None, max_age_days: int = MAX_AGE_DAYS
) -> list[StalePrices]:
    """One warning per provider whose oldest price data is over ``max_age_days`` old."""
    now = today or today_fn()
    oldest: dict[str, date] = {}
    for o in offers:
        day = _day(o.catalog_date)
        if day is not None and (o.provider not in oldest or day < oldest[o.provider]):
            oldest[o.provider] = day
    out = []
    for provider, day in sorted(oldest.items()):
        age = (now - day).days
        if age > max_age_days:
            out.append(
                StalePrices(
                    provider=provider,
                    catalog_date=day.isoformat(),
                    age_days=age,
                    message=f"{provider}: prices come from a catalog of {day.isoformat()}, "
                    f"{age} days old (over {max_age_days}): check current prices before "
                    "relying on them (docs/providers.md says how to regenerate it)",
                )
            )
    return out
