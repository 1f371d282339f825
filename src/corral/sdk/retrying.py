"""Retry transient failures (dataset loading, tracker init) with exponential backoff and jitter.

::

    @retry(attempts=5, on=(OSError, TimeoutError))
    def open_shard(url): ...

The wait before retry ``n`` (1-based) is ``min(max_delay, base * 2 ** (n - 1))`` seconds; with
``jitter=True`` it is drawn uniformly from the upper half of that, ``[d/2, d]`` ("equal
jitter": workers that failed together do not retry together, and the backoff still grows).
Only exceptions of the types in ``on`` are retried, except those in ``not_on``: by default the
``OSError`` subclasses that no retry cures (:data:`NOT_TRANSIENT`: ``FileNotFoundError``,
``PermissionError``, ``IsADirectoryError``, ``NotADirectoryError``), unless ``on`` names one
of them (or a subclass) itself, e.g. ``on=FileNotFoundError`` to wait for a file to appear.
Anything else, and the last failure once ``attempts`` calls have failed, propagates unchanged. Each retry is logged as a warning on the
``corral.sdk.retry`` logger. ``sleep`` is injectable so tests never wait for real. Works as
``@retry`` and ``@retry(...)``; synchronous functions only.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import tenacity

__all__ = ["NOT_TRANSIENT", "backoff_delay", "retry"]

#: OSErrors that a retry does not cure: not retried by default, even though ``on`` has OSError.
NOT_TRANSIENT: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)

log = logging.getLogger("corral.sdk.retry")
F = TypeVar("F", bound=Callable[..., Any])


def backoff_delay(
    retry_number: int,
    *,
    base: float,
    max_delay: float,
    jitter: bool,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry ``retry_number`` (1 = the first retry)."""
    delay = min(float(max_delay), float(base) * 2 ** max(0, retry_number - 1))
    if jitter:
        delay = (rng or random).uniform(delay / 2, delay)
    return delay


def retry(
    fn: F | None = None,
    /,
    *,
    attempts: int = 5,
    base: float = 0.5,
    max_delay: float = 30,
    jitter: bool = True,
    on: tuple[type[BaseException], ...] | type[BaseException] = (
        OSError,
        ConnectionError,
        TimeoutError,
    ),
    not_on: tuple[type[BaseException], ...] | type[BaseException] | None = None,
    sleep: Callable[[float], Any] = time.sleep,
    rng: random.Random | None = None,
) -> Any:
    """Decorate ``fn`` to retry on ``on`` exceptions but not on ``not_on`` ones (None: the
    :data:`NOT_TRANSIENT` types that ``on`` does not name), up to ``attempts`` calls."""
    if attempts < 1:
        raise ValueError(f"retry: attempts must be >= 1, got {attempts}")
    if base < 0 or max_delay < 0:
        raise ValueError("retry: base and max_delay must be >= 0")
    kinds = on if isinstance(on, tuple) else (on,)
    if not_on is None:
        skip = tuple(t for t in NOT_TRANSIENT if not any(issubclass(k, t) for k in kinds))
    else:
        skip = not_on if isinstance(not_on, tuple) else (not_on,)

    def transient(exc: BaseException) -> bool:
        return isinstance(exc, kinds) and not isinstance(exc, skip)

    def wait(state: tenacity.RetryCallState) -> float:
        return backoff_delay(
            state.attempt_number, base=base, max_delay=max_delay, jitter=jitter, rng=rng
        )

    def decorate(func: F) -> F:
        name = getattr(func, "__qualname__", repr(func))

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            delay = state.next_action.sleep if state.next_action else 0.0
            log.warning(
                "%s failed (attempt %d/%d: %s: %s); retrying in %.2fs",
                name,
                state.attempt_number,
                attempts,
                type(exc).__name__,
                exc,
                delay,
            )

        retrying = tenacity.Retrying(
            sleep=sleep,
            stop=tenacity.stop_after_attempt(attempts),
            wait=wait,
            retry=tenacity.retry_if_exception(transient),
            before_sleep=before_sleep,
            reraise=True,
        )

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return retrying.copy()(func, *args, **kwargs)

        wrapper.retrying = retrying  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    if fn is not None:
        return decorate(fn)
    return decorate
