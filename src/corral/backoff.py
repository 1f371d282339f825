"""Exponential backoff with jitter, written once for every retry loop in corral (provider
HTTP calls, webhook deliveries, the SDK's ``retry``). Standard library only."""

from __future__ import annotations

import random


def backoff_delay(
    failures: int,
    *,
    base: float,
    max_delay: float,
    jitter: bool = True,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait after ``failures`` failed tries (1 = before the first retry):
    ``base * 2**(failures-1)``, at most ``max_delay``; with ``jitter`` times a random factor
    in [0.5, 1] (one draw of ``rng``, the ``random`` module's by default)."""
    delay = min(float(max_delay), float(base) * 2 ** max(0, failures - 1))
    if jitter:
        delay *= 0.5 + 0.5 * (rng or random).random()
    return delay
