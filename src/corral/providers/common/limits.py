"""Request budgets shared by every client of one API key in this process.

A cloud that limits requests per API key (SaladCloud: 240 a minute) counts the requests of
every run a controller watches together. Each run's provider object, the CLI's launch and the
leak sweep therefore take their tokens from one :class:`~corral.providers.http.TokenBucket`
per (provider, key): :func:`shared_bucket`. The key itself is never kept, only its sha256.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

from corral.providers.http import TokenBucket

_LOCK = threading.Lock()
_BUCKETS: dict[tuple[str, str, float, int], TokenBucket] = {}


def shared_bucket(
    provider: str,
    api_key: str,
    per_minute: float,
    burst: int,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TokenBucket:
    """The one bucket of ``provider``'s ``api_key`` at ``per_minute`` requests a minute (at most
    ``burst`` at once). With the default clock every caller shares it; a caller with its own
    clock (a test, a benchmark) gets a bucket of its own."""
    if clock is not time.monotonic or sleep is not time.sleep:
        return TokenBucket(per_minute / 60.0, burst, clock=clock, sleep=sleep)
    digest = hashlib.sha256(api_key.encode()).hexdigest()
    key = (provider, digest, float(per_minute), int(burst))
    with _LOCK:
        bucket = _BUCKETS.get(key)
        if bucket is None:
            bucket = _BUCKETS[key] = TokenBucket(per_minute / 60.0, burst)
        return bucket
