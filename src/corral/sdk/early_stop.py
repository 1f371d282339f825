"""Early stopping on a validation metric.

``EarlyStopping(patience=3)``: call ``step(value)`` after each evaluation; it returns True once
``patience`` evaluations in a row brought no improvement. An improvement is a value below
``best - min_delta`` (``mode="min"``) or above ``best + min_delta`` (``mode="max"``); the first
finite value always improves. NaN and infinite values never improve (a diverged loss is a bad
evaluation, not a new best). An improvement resets the count.

Its state (``state_dict()`` / ``load_state_dict()``) belongs in the checkpoint so a resumed run
keeps counting where it stopped. With ``request_stop_on_trigger=True`` the first trigger in this
process also calls :func:`corral.sdk.signals.request_stop` (reason ``"early stopping"``), so
loops that already watch ``should_stop()`` end without another branch. A stop request does not
survive the process: loading a state that already calls for a stop under this ``patience``
(e.g. the attempt that triggered was preempted before it could stop) requests it again at once,
and a resumed run whose ``patience`` was raised requests it when the new patience runs out.
"""

from __future__ import annotations

import math
from typing import Any, Literal

__all__ = ["EarlyStopping"]


class EarlyStopping:
    def __init__(
        self,
        patience: int,
        min_delta: float = 0.0,
        mode: Literal["min", "max"] = "min",
        *,
        request_stop_on_trigger: bool = False,
    ):
        if not isinstance(patience, int) or isinstance(patience, bool) or patience < 0:
            raise ValueError(f"EarlyStopping: patience must be an integer >= 0, got {patience!r}")
        if not (isinstance(min_delta, (int, float)) and min_delta >= 0):
            raise ValueError(f"EarlyStopping: min_delta must be >= 0, got {min_delta!r}")
        if mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping: mode must be 'min' or 'max', got {mode!r}")
        self.patience = patience
        self.min_delta = float(min_delta)
        self.mode = mode
        self.request_stop_on_trigger = request_stop_on_trigger
        self.best: float | None = None
        self.num_bad = 0
        self.triggered = False
        self._requested = False  # request_stop() called by this object (this process)

    def _improves(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def step(self, value: float) -> bool:
        """Record one evaluation; True means "stop training now"."""
        value = float(value)
        if self._improves(value):
            self.best = value
            self.num_bad = 0
        else:
            self.num_bad += 1
        stop = self._stopping()
        if stop:
            self.triggered = True
            self._request_stop()
        return stop

    def _stopping(self) -> bool:
        return self.num_bad > 0 and self.num_bad >= self.patience

    def _request_stop(self) -> None:
        # Once per process: ``triggered`` comes back from a checkpoint, a stop request does not.
        if self.request_stop_on_trigger and not self._requested:
            self._requested = True
            from corral.sdk.signals import request_stop

            request_stop("early stopping")

    def state_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "patience": self.patience,
            "min_delta": self.min_delta,
            "best": self.best,
            "num_bad": self.num_bad,
            "triggered": self.triggered,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("mode", self.mode) != self.mode:
            raise ValueError(
                f"EarlyStopping: saved state is for mode={state['mode']!r}, this one is {self.mode!r}"
            )
        best = state.get("best")
        self.best = None if best is None else float(best)
        self.num_bad = int(state.get("num_bad", 0))
        self.triggered = bool(state.get("triggered", False))
        if self.triggered and self._stopping():
            self._request_stop()  # it had stopped the run; the new process must stop too

    def __repr__(self) -> str:
        return (
            f"EarlyStopping(patience={self.patience}, min_delta={self.min_delta}, "
            f"mode={self.mode!r}, best={self.best}, num_bad={self.num_bad})"
        )
