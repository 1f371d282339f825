"""One HTTP attempt of a webhook delivery, and when to try again.

Retried: network errors and timeouts, 408, 429 and 5xx (``Retry-After`` honoured, seconds or an
HTTP date). Any other status is final: 2xx delivered, the rest (a 4xx the receiver means, a
redirect that is not followed) given up at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from corral.backoff import backoff_delay

RETRY_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: before try ``n+1`` wait ``base * 2**(n-1)`` (at most
    ``max_delay``) times a random factor in [0.5, 1], or the receiver's ``Retry-After`` when
    longer (at most ``max_retry_after``). Give up after ``max_attempts`` tries."""

    max_attempts: int = 10
    base_delay: float = 2.0
    max_delay: float = 300.0
    max_retry_after: float = 900.0
    #: per-request timeout, seconds (connect, read and write each)
    timeout: float = 10.0

    def delay(self, attempts: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait after ``attempts`` failed tries."""
        wait = backoff_delay(attempts, base=self.base_delay, max_delay=self.max_delay, rng=rng)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after))
        return wait


@dataclass(frozen=True)
class Outcome:
    ok: bool
    retry: bool
    error: str = ""
    status: int | None = None
    retry_after: float | None = None


def parse_retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` as seconds from ``now`` (unix seconds), or None if absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def classify(status: int, retry_after: str | None, now: float) -> Outcome:
    if 200 <= status < 300:
        return Outcome(ok=True, retry=False, status=status)
    retry = status in RETRY_STATUSES or status >= 500
    wait = parse_retry_after(retry_after, now) if retry else None
    return Outcome(ok=False, retry=retry, error=f"HTTP {status}", status=status, retry_after=wait)


def post(
    client: Any, url: str, body: bytes, headers: dict[str, str], *, timeout: float, now: float
) -> Outcome:
    """POST ``body`` to ``url`` once. Never raises for what the network or receiver does."""
    import httpx

    try:
        response = client.post(url, content=body, headers=headers, timeout=timeout)
    except httpx.TimeoutException:
        return Outcome(ok=False, retry=True, error=f"no answer within {timeout:g}s")
    except httpx.TransportError as e:  # connection refused, reset, DNS, TLS, ...
        return Outcome(ok=False, retry=True, error=_describe(e, url))
    except httpx.HTTPError as e:  # e.g. an invalid URL: trying again will not help
        return Outcome(ok=False, retry=False, error=_describe(e, url))
    try:
        response.read()  # let the connection be reused; the body itself is ignored
    except httpx.HTTPError:
        pass
    return classify(response.status_code, response.headers.get("retry-after"), now)


def _describe(exc: Exception, url: str) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.replace(url, "<url>")  # the URL's path may hold a token
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
