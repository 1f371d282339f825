"""The pool's Redis connection, and its errors as one line without the broker's password."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from corral.errors import ProviderError, ProviderUnavailable
from corral.queue.settings import PoolSettings

_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    return _PASSWORD.sub(r"\1***@", url)


#: what to install when the pool's packages are missing
EXTRA_HINT = "pip install 'corral[queue]'"


def connect(settings: PoolSettings) -> Any:
    """A ``redis.Redis`` on the broker (answers decoded as text). ProviderError naming the
    extra when the ``redis`` package is missing."""
    try:
        import redis
    except ImportError:
        raise ProviderError(f"the worker pool needs the queue extra: {EXTRA_HINT}") from None

    return redis.Redis.from_url(
        settings.broker_url,
        decode_responses=True,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
    )


@contextlib.contextmanager
def broker_errors(settings: PoolSettings) -> Iterator[None]:
    """Turn a Redis failure into :class:`ProviderUnavailable` naming the broker (no
    password, no traceback)."""
    import redis

    try:
        yield
    except redis.RedisError as exc:
        what = type(exc).__name__
        raise ProviderUnavailable(
            f"the pool's broker {safe_url(settings.broker_url)} failed: {what}: "
            f"{safe_url(str(exc))[:200]}"
        ) from None
