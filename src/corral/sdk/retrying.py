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
Anything else, and the last failure once ``attempts`` calls have failed, propagates: the
original exception, with a note (``add_note``) of how many calls failed when there was more
than one. ``on``/``not_on`` take one exception class or any iterable of them. Each retry is
logged as a warning on the ``corral.sdk.retry`` logger. ``sleep`` is injectable so tests never
wait for real. Works as ``@retry`` and ``@retry(...)``; synchronous functions only (an async
or generator function is a TypeError when decorated: its errors would never be retried).
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import tenacity

from corral.backoff import backoff_delay
from corral.secrets.redact import redact

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


def _exception_types(what: str, value: Any) -> tuple[type[BaseException], ...]:
    """``on``/``not_on`` as a tuple of exception classes: one class, or any iterable of them
    (``[OSError, TimeoutError]`` too); anything else is a TypeError naming the argument."""
    items = (value,) if isinstance(value, (type, str)) else value
    try:
        kinds = tuple(items)
    except TypeError:
        kinds = (value,)
    for kind in kinds:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(
                f"retry: {what}= takes exception classes (one, or a tuple or list of them), "
                f"got {kind!r}"
            )
    return kinds


def retry(
    fn: F | None = None,
    /,
    *,
    attempts: int = 5,
    base: float = 0.5,
    max_delay: float = 30,
    jitter: bool = True,
    on: Iterable[type[BaseException]] | type[BaseException] = (
        OSError,
        ConnectionError,
        TimeoutError,
    ),
    not_on: Iterable[type[BaseException]] | type[BaseException] | None = None,
    sleep: Callable[[float], Any] = time.sleep,
    rng: random.Random | None = None,
) -> Any:
    """Decorate ``fn`` to retry on ``on`` exceptions but not on ``not_on`` ones (None: the
    :data:`NOT_TRANSIENT` types that ``on`` does not name), up to ``attempts`` calls."""
    if attempts < 1:
        raise ValueError(f"retry: attempts must be >= 1, got {attempts}")
    if base < 0 or max_delay < 0:
        raise ValueError("retry: base and max_delay must be >= 0")
    kinds = _exception_types("on", on)
    if not_on is None:
        skip = tuple(t for t in NOT_TRANSIENT if not any(issubclass(k, t) for k in kinds))
    else:
        skip = _exception_types("not_on", not_on)

    def transient(exc: BaseException) -> bool:
        return isinstance(exc, kinds) and not isinstance(exc, skip)

    def wait(state: tenacity.RetryCallState) -> float:
        return backoff_delay(
            state.attempt_number, base=base, max_delay=max_delay, jitter=jitter, rng=rng
        )

    def decorate(func: F) -> F:
        name = getattr(func, "__qualname__", repr(func))
        if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(f"retry: {name} is async; retry decorates synchronous functions only")
        if inspect.isgeneratorfunction(func):
            raise TypeError(
                f"retry: {name} is a generator function: a call only creates the generator, "
                "so its errors would never be retried"
            )

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            delay = state.next_action.sleep if state.next_action else 0.0
            log.warning(
                "%s failed (attempt %d/%d: %s: %s); retrying in %.2fs",
                name,
                state.attempt_number,
                attempts,
                type(exc).__name__,
                redact(str(exc)),
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
            this = retrying.copy()
            try:
                return this(func, *args, **kwargs)
            except Exception as e:  # the original error, with a note of the attempts made
                tries = this.statistics.get("attempt_number", 1)
                if tries > 1:
                    e.add_note(
                        f"corral.sdk.retry: {name} failed {tries} times; this is the last error"
                    )
                raise

        wrapper.retrying = retrying  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    if fn is not None:
        return decorate(fn)
    return decorate
