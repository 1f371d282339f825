"""What a run has cost: the sum over its attempts of price/hour x billed time, from
provision until the provider confirmed teardown (or now, for a live attempt)."""

from __future__ import annotations

from datetime import datetime

from corral.control.context import Context
from corral.store.records import AttemptRecord

#: an attempt that never got a machine (``launching``: no offer had capacity) is not billed
NO_CAPACITY = "no_capacity"


def _billed(attempt: AttemptRecord, until: datetime) -> float:
    if attempt.started_at is None or not attempt.price_per_hour:
        return 0.0
    seconds = max(0.0, (until - attempt.started_at).total_seconds())
    return attempt.price_per_hour * seconds / 3600.0


def attempt_cost(attempt: AttemptRecord, until: datetime) -> float:
    """The cost of one attempt billed until ``until`` (0 before it started or when free)."""
    return round(_billed(attempt, until), 6)


def run_cost(ctx: Context, run_id: str) -> float:
    """Sum over attempts of price x billed time (until confirmed teardown, or now if live)."""
    now = ctx.clock()
    total = 0.0
    for a in ctx.store.attempts(run_id):
        if a.exit_reason == NO_CAPACITY:
            continue
        total += _billed(a, a.billed_until or now)
    return round(total, 6)
