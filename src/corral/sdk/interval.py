"""When to save the next checkpoint: :class:`CheckpointTimer`.

Under corral, ``CORRAL_CHECKPOINT_INTERVAL_S`` holds the interval the controller worked out
for this attempt: the spec's ``checkpoints.interval``, or, on a provider that gives no
preemption notice, one short enough that an interruption loses at most
``checkpoints.max_lost_work`` on average (see ``docs/sdk-checkpoints.md``)::

    from corral.sdk import Checkpointer
    from corral.sdk.interval import CheckpointTimer

    ckpt, timer = Checkpointer(), CheckpointTimer(default=1800)
    for step in range(start, total):
        train_step()
        if timer.due():
            ckpt.save(snapshot(step), step)
            timer.saved()

Outside corral (or on a provider that needs no interval) ``default`` applies; with no default
either, ``due()`` is never true and the job saves when it chooses.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping

ENV_CKPT_INTERVAL = "CORRAL_CHECKPOINT_INTERVAL_S"


def checkpoint_interval(
    default: float | None = None, environ: Mapping[str, str] | None = None
) -> float | None:
    """Seconds between checkpoints: ``CORRAL_CHECKPOINT_INTERVAL_S``, else ``default``. A
    value that is not a positive number is ignored (the default applies)."""
    raw = (os.environ if environ is None else environ).get(ENV_CKPT_INTERVAL, "")
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


class CheckpointTimer:
    """``due()`` once ``interval_s`` (default: :func:`checkpoint_interval`) has passed since
    the timer started or since the last ``saved()``."""

    def __init__(
        self,
        interval_s: float | None = None,
        *,
        default: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.interval_s = (
            interval_s if interval_s is not None else checkpoint_interval(default, environ)
        )
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        return self.interval_s is not None and self._clock() - self._last >= self.interval_s

    def saved(self) -> None:
        self._last = self._clock()

    def remaining(self) -> float | None:
        """Seconds until the next save is due (None: no interval)."""
        if self.interval_s is None:
            return None
        return max(0.0, self.interval_s - (self._clock() - self._last))
