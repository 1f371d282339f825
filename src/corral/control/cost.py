"""What a run has cost: the sum over its attempts of price/hour x billed time, from
provision until the provider confirmed teardown (or now, for a live attempt); and what a stop
will cost, learned per provider from the stops observed (:func:`stop_estimate`)."""

from __future__ import annotations

import json
import math
from datetime import datetime

from corral.control.context import Context, log
from corral.control.notes import CostBasis
from corral.files import write_atomic
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


def run_cost(ctx: Context, run_id: str, *, steady: int | None = None) -> float:
    """Sum over attempts of price x billed time (until confirmed teardown, or now if live).

    ``steady``: the run's current attempt, when nothing billed changed since the last call
    for this run (the agent's status is the same: a quiet run's periodic cost); the
    attempts read then serve again, billed until now, with no read of the store (unless
    there was no earlier read in this controller, or it was of another attempt)."""
    now = ctx.clock()
    notes = ctx.notes(run_id)
    basis = notes.cost_basis
    if basis is None or steady is None or basis.attempt != steady:
        closed, live, last = 0.0, [], 0
        for a in ctx.store.attempts(run_id):
            last = max(last, a.number)
            if a.exit_reason == NO_CAPACITY:
                continue
            if a.billed_until is not None:
                closed += _billed(a, a.billed_until)
            else:
                live.append(a)
        basis = notes.cost_basis = CostBasis(last, closed, tuple(live))
    total = basis.closed + sum(_billed(a, now) for a in basis.live)
    return round(total, 6)


# --- what a stop costs: learned per provider ------------------------------------------------

#: ``CORRAL_HOME/<this>``: per provider, the last seconds from a stop request to the provider's
#: confirmed teardown (the controller's own notes; losing the file only costs the learning)
STOP_TIMES_FILE = "stop-times.json"
#: observations kept per provider (the newest)
STOP_TIMES_KEPT = 20
#: the share of observed stops that the estimate covers (nearest rank: the maximum until
#: there are 20 of them)
STOP_TIME_PERCENTILE = 0.95
#: a longer "stop" is a controller that was away, not the provider's teardown: not learned
MAX_STOP_TIME_S = 900.0


def _stop_times(ctx: Context) -> dict[str, list[float]]:
    if ctx.stop_times is not None:
        return ctx.stop_times
    try:
        raw = json.loads((ctx.home / STOP_TIMES_FILE).read_text())
    except (OSError, ValueError):
        raw = {}
    times: dict[str, list[float]] = {}
    if isinstance(raw, dict):
        for name, values in raw.items():
            if isinstance(name, str) and isinstance(values, list):
                kept = [float(v) for v in values if isinstance(v, int | float) and v >= 0]
                times[name] = [v for v in kept if math.isfinite(v)][-STOP_TIMES_KEPT:]
    ctx.stop_times = times
    return times


def record_stop_time(ctx: Context, provider: str, seconds: float) -> None:
    """Remember that a stop on ``provider`` took ``seconds`` from request to confirmed
    teardown (kept in ``CORRAL_HOME/stop-times.json``; a write failure is only logged)."""
    if not provider or not math.isfinite(seconds) or not 0 <= seconds <= MAX_STOP_TIME_S:
        return
    times = _stop_times(ctx)
    times[provider] = [*times.get(provider, []), round(seconds, 3)][-STOP_TIMES_KEPT:]
    try:
        write_atomic(ctx.home / STOP_TIMES_FILE, json.dumps(times, indent=2), fsync=False)
    except OSError as exc:
        log.warning("cannot save the observed stop times: %s", exc.strerror)


def stop_estimate(ctx: Context, provider: str | None) -> float:
    """Seconds a stop on ``provider`` is expected to take, request to confirmed teardown: a
    high percentile of the ones observed, ``Settings.budget_stop_estimate_s`` until one is."""
    seen = sorted(_stop_times(ctx).get(provider or "", []))
    if not seen:
        return ctx.settings.budget_stop_estimate_s
    rank = max(1, math.ceil(STOP_TIME_PERCENTILE * len(seen)))
    return seen[rank - 1]
