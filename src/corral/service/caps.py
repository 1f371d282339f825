"""Spending caps across runs (``corral budget``, ``/api/v1/budget``): set, list with what each
has spent, and the check a launch passes.

A cap is dollars per user (on a team server: the API token's name; on one's own machine:
``CORRAL_USER``, else the login name), per project (the spec's ``project``) or for the whole
team, per calendar month (UTC) or in all. The controller stops running runs at a cap
(:mod:`corral.control.spend`); here a launch is refused when what the cap has spent plus the
run's expected cost would pass it. A run's expected cost is its own budget
(``budget.max_cost_usd``, the default cap included) or, without one, the cheapest offer's
price over ``limits.max_runtime``, else over one hour.
"""

from __future__ import annotations

import getpass
import math
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from corral.control.spend import assess, describe, period_label, period_start
from corral.errors import BadInput, SpendingCapReached
from corral.providers.base import Offer
from corral.service._store import using
from corral.service.views import IsoDatetime, View
from corral.spec import JobSpec
from corral.spec.fields import check_name
from corral.store import Store
from corral.store.caps import PERIODS, SCOPES

ENV_USER = "CORRAL_USER"
#: without a budget or a runtime limit, a launch is expected to cost this many hours
UNBOUNDED_HOURS = 1.0
#: a cap above this is a typo, not a budget
MAX_CAP_USD = 1e9


class CapView(View):
    """A cap and what it has spent in its current period."""

    scope: str
    subject: str
    period: str
    #: ``2026-11`` for a monthly cap, ``total``
    period_label: str
    amount_usd: float
    warn_at: float
    spent_usd: float
    left_usd: float
    fraction: float
    #: runs whose machines bill against it now
    live_runs: int
    set_by: str | None
    updated_at: IsoDatetime


class CapList(View):
    caps: list[CapView]


def launcher(environ: Mapping[str, str] | None = None) -> str | None:
    """Who launches from this machine: ``CORRAL_USER``, else the login name (None if none)."""
    env = os.environ if environ is None else environ
    name = env.get(ENV_USER, "").strip()
    if name:
        return name
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):
        return None


def _subject(scope: str, subject: str | None) -> str:
    if scope not in SCOPES:
        raise BadInput(f"scope {scope!r}: use one of {', '.join(SCOPES)}")
    if scope == "team":
        if subject:
            raise BadInput("a team cap names no user or project")
        return ""
    if not subject:
        raise BadInput(f"a {scope} cap needs the {scope}'s name")
    if scope == "project":
        try:
            check_name(subject)
        except ValueError as exc:
            raise BadInput(f"project: {exc}") from None
    elif len(subject) > 128 or not subject.isprintable():
        raise BadInput(f"user {subject!r}: a token or login name of at most 128 characters")
    return subject


def _views(store: Store, now: datetime) -> list[CapView]:
    out = []
    for cap in store.caps():
        state = assess(
            cap,
            store.cap_spans(cap.scope, cap.subject, period_start(cap.period, now)),
            now,
            stop_s=lambda _provider: 0.0,
            next_look_s=0.0,
        )
        out.append(
            CapView(
                scope=cap.scope,
                subject=cap.subject,
                period=cap.period,
                period_label=state.period,
                amount_usd=cap.amount_usd,
                warn_at=cap.warn_at,
                spent_usd=round(state.spent_usd, 4),
                left_usd=round(max(0.0, state.left_usd), 4),
                fraction=round(state.spent_usd / cap.amount_usd, 4),
                live_runs=len(state.runs),
                set_by=cap.set_by,
                updated_at=cap.updated_at,
            )
        )
    return out


def list_caps(*, store: Store | None = None, now: datetime | None = None) -> CapList:
    with using(store) as st:
        return CapList(caps=_views(st, now or datetime.now(UTC)))


def set_cap(
    scope: str,
    subject: str | None,
    amount_usd: float,
    *,
    warn_at: float = 0.9,
    period: str = "month",
    set_by: str | None = None,
    store: Store | None = None,
) -> CapView:
    """Create or replace a cap; one-line BadInput naming a bad value."""
    name = _subject(scope, subject)
    if not (math.isfinite(amount_usd) and 0 < amount_usd <= MAX_CAP_USD):
        raise BadInput(f"amount {amount_usd!r}: dollars above 0 (at most {MAX_CAP_USD:.0f})")
    if not (math.isfinite(warn_at) and 0 < warn_at <= 1):
        raise BadInput(f"warn_at {warn_at!r}: a fraction in (0, 1], e.g. 0.9")
    if period not in PERIODS:
        raise BadInput(f"period {period!r}: use one of {', '.join(PERIODS)}")
    with using(store) as st:
        st.set_cap(
            scope, name, amount_usd=amount_usd, warn_at=warn_at, period=period, set_by=set_by
        )
        return next(
            v for v in _views(st, datetime.now(UTC)) if (v.scope, v.subject) == (scope, name)
        )


def remove_cap(scope: str, subject: str | None, *, store: Store | None = None) -> CapView:
    """Remove a cap; NotFound when there is none."""
    name = _subject(scope, subject)
    with using(store) as st:
        found = next(
            (v for v in _views(st, datetime.now(UTC)) if (v.scope, v.subject) == (scope, name)),
            None,
        )
        st.remove_cap(scope, name)
    assert found is not None
    return found


def expected_cost(spec: JobSpec, offers: Sequence[Offer]) -> tuple[float, str]:
    """What the run is expected to cost, and why (see the module's docstring)."""
    price = min((o.price_per_hour for o in offers), default=0.0)
    if price <= 0:
        return 0.0, "free"
    cap = spec.budget.max_cost_usd
    hours = (spec.limits.max_runtime or 0) / 3600.0
    by_time = price * (hours or UNBOUNDED_HOURS)
    if cap is not None and cap <= by_time:
        return float(cap), "its budget"
    if hours:
        return by_time, f"${price:.2f}/h for limits.max_runtime"
    if cap is not None:
        return float(cap), "its budget"
    return by_time, f"an hour at ${price:.2f}/h (no budget or max_runtime)"


def check_launch(
    store: Store,
    *,
    owner: str | None,
    project: str | None,
    expected_usd: float,
    why: str,
    now: datetime | None = None,
) -> None:
    """SpendingCapReached (one line naming the cap and what is left) when a cap that counts
    the run would be passed by ``expected_usd`` on top of its spend."""
    if expected_usd <= 0:
        return
    now = now or datetime.now(UTC)
    for cap in store.caps():
        if cap.scope == "user" and cap.subject != owner:
            continue
        if cap.scope == "project" and cap.subject != project:
            continue
        spans = store.cap_spans(cap.scope, cap.subject, period_start(cap.period, now))
        state = assess(cap, spans, now, stop_s=lambda _p: 0.0, next_look_s=0.0)
        if state.spent_usd + expected_usd > cap.amount_usd:
            left = max(0.0, state.left_usd)
            raise SpendingCapReached(
                f"spending cap of {describe(cap)} (${cap.amount_usd:.2f}, "
                f"{period_label(cap.period, now)}): ${state.spent_usd:.2f} spent, ${left:.2f} "
                f"left; this run is expected to cost ${expected_usd:.2f} ({why}): not launched "
                "(a smaller budget.max_cost_usd fits; `corral budget` shows the caps)",
                fields={"cap": {"scope": cap.scope, "subject": cap.subject}, "left_usd": left},
            )
