"""Waiting for a run to end without streaming (``--wait``)."""

from __future__ import annotations

import time
from typing import Any


def wait_for_end(
    store: Any, run_id: str, *, poll_s: float = 0.25, timeout_s: float | None = None
) -> Any:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        run = store.get_run(run_id)
        if run.terminal:
            return run
        if deadline is not None and time.monotonic() > deadline:
            return run
        time.sleep(poll_s)
