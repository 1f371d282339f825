"""RunPod's request budget: one token bucket per API key, held off by RunPod's own headers.

RunPod limits requests per account key, whatever client sends them (REST v2's document:
"per-user windowed limits"). Every RunPod client of one key in a process (each run's provider
object, the CLI, the leak sweep; REST and GraphQL alike) therefore takes its tokens from one
bucket: :func:`api_bucket`, through :func:`corral.providers.common.limits.shared_bucket`.

REST v2 says on every authenticated answer where each window stands (``RateLimit``, the
document's ``RateLimitHeader``: ``"minute";r=0;t=12, "hour";r=2800;t=1812``, ``r`` requests
left and ``t`` seconds to the window's reset). A window with nothing left means the next
request would be a 429, so the bucket holds off until that window resets
(:func:`exhausted_for`, :class:`RateLimitWatch`). A 429's ``Retry-After`` holds the same bucket
off (:class:`~corral.providers.http.ProviderHTTP`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from corral.providers.common.limits import shared_bucket
from corral.providers.http import TokenBucket

#: a bucket that never makes anyone wait on its own (``rate_per_s`` None): it still holds
#: off when RunPod says a window is spent
_UNLIMITED_PER_MINUTE = 1e9
_UNLIMITED_BURST = 1_000_000


def api_bucket(
    provider: str,
    api_key: str,
    rate_per_s: float | None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TokenBucket:
    """The one bucket of ``api_key``: ``rate_per_s`` requests a second on average, bursts of
    twice that (None: no rate of corral's own, RunPod's headers only)."""
    if rate_per_s is None:
        per_minute, burst = _UNLIMITED_PER_MINUTE, _UNLIMITED_BURST
    else:
        per_minute, burst = rate_per_s * 60.0, max(1, int(rate_per_s * 2))
    return shared_bucket(provider, api_key, per_minute, burst, clock=clock, sleep=sleep)


def exhausted_for(header: str | None) -> float | None:
    """Seconds until the windows of a ``RateLimit`` header that have no request left reset
    (the longest of them); None when every window has some left, or nothing can be read."""
    waits = []
    for member in (header or "").split(","):
        params: dict[str, str] = {}
        for part in member.split(";")[1:]:
            name, sep, value = part.partition("=")
            if sep:
                params[name.strip()] = value.strip()
        try:
            left, reset = int(params["r"]), float(params["t"])
        except (KeyError, ValueError):
            continue
        if left <= 0 and reset >= 0:
            waits.append(reset)
    return max(waits) if waits else None


class RateLimitWatch:
    """The HTTP client of a :class:`~corral.providers.runpod.api.RunPodAPI`: every answer's
    ``RateLimit`` header is read, and a spent window holds ``bucket`` off until it resets.
    Everything else is the wrapped :class:`httpx.Client`'s."""

    def __init__(self, client: httpx.Client, bucket: TokenBucket):
        self._client = client
        self.bucket = bucket

    def _saw(self, resp: httpx.Response) -> httpx.Response:
        wait = exhausted_for(resp.headers.get("RateLimit"))
        if wait:
            self.bucket.hold_off(wait)
        return resp

    def request(self, *args: Any, **kwargs: Any) -> httpx.Response:
        return self._saw(self._client.request(*args, **kwargs))

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        return self._saw(self._client.send(request, **kwargs))

    def build_request(self, *args: Any, **kwargs: Any) -> httpx.Request:
        return self._client.build_request(*args, **kwargs)

    def close(self) -> None:
        self._client.close()
