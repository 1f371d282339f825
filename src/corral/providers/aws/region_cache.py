"""Prices read from AWS per region, kept for a while: one mechanism behind the spot prices
(EC2's spot price history) and the on-demand ones (the Price List API)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from corral.errors import ProviderError

T = TypeVar("T")


@dataclass(frozen=True)
class _Entry(Generic[T]):
    at: float
    value: T | None = None
    error: ProviderError | None = None


class RegionCache(Generic[T]):
    """``fetch(region, now)`` reused for ``ttl`` seconds of ``clock`` per region. With
    ``retry_failed_s`` a failure is remembered for that long (or ``ttl``, if shorter), so that
    every caller in between gets it again without asking AWS; without it a failure is not
    kept and the next caller asks again."""

    def __init__(
        self,
        fetch: Callable[[str, float], T],
        ttl: float,
        clock: Callable[[], float] = time.time,
        retry_failed_s: float | None = None,
    ) -> None:
        self._fetch, self.ttl, self.clock = fetch, ttl, clock
        self._retry_failed_s = retry_failed_s
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry[T]] = {}

    def get(self, region: str) -> tuple[T, float]:
        """(the value, when it was read). Raises the :class:`ProviderError` of the read."""
        now = self.clock()
        with self._lock:
            cached = self._entries.get(region)
        if cached is not None:
            keep = self.ttl
            if cached.error is not None and self._retry_failed_s is not None:
                keep = min(self.ttl, self._retry_failed_s)
            if now - cached.at < keep:
                if cached.error is not None:
                    raise cached.error
                assert cached.value is not None
                return cached.value, cached.at
        try:
            value = self._fetch(region, now)
        except ProviderError as exc:
            if self._retry_failed_s is not None:
                with self._lock:
                    self._entries[region] = _Entry(now, error=exc)
            raise
        with self._lock:
            self._entries[region] = _Entry(now, value)
        return value, now

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
