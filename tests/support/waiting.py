"""Polling for a condition that another thread or process makes true."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 20.0,
    interval: float = 0.05,
    message: str | Callable[[], str] = "the condition",
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value, and return
    that value.

    ``predicate`` is called at least once, and the last call comes after ``timeout`` seconds have
    passed, so a condition met just in time is seen. When it never holds, fails with
    ``AssertionError("timed out after <timeout>s waiting for <message>")``; ``message`` says what
    was awaited, and may be a function (called once, at the failure) to show the last state seen.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            what = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
