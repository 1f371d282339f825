"""What the run has cost so far, and a budget that stops it.

``CostMeter`` multiplies the hourly price by the time this process has been metering, and adds
the cost of earlier attempts:

* price: the ``hourly_price`` argument, else ``CORRAL_HOURLY_PRICE`` (set by the agent from the
  offer), else 0 (a local run costs nothing);
* budget: the ``budget_usd`` argument, else ``CORRAL_BUDGET_USD``, else none;
* earlier attempts: the ``offset_usd`` argument, else ``CORRAL_COST_OFFSET_USD``, else 0.

Resuming: :meth:`CostMeter.load_state_dict` takes the ``cost_usd`` saved in a checkpoint. The
controller's offset (billed time of all earlier attempts, provision to teardown) and the saved
value (what the meter had counted when the checkpoint was written) both measure the *same*
earlier spending, so they are not added: the meter continues from the larger of the two. The
saved value is larger for a plain ``python train.py`` restart (no controller); the controller's
offset is larger when work after the last checkpoint was lost or when boot time was billed.

:meth:`CostMeter.check` warns once when the cost reaches ``warn_fraction`` (90%) of the budget
(a :class:`BudgetWarning` and a ``metrics`` record in the progress file) and calls
:func:`corral.sdk.signals.request_stop` once it reaches 100%.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

from corral.errors import BadInput
from corral.sdk import progress_file, signals
from corral.wire.env import ENV_BUDGET_USD, ENV_COST_OFFSET, ENV_HOURLY_PRICE


class BudgetWarning(UserWarning):
    """The run's cost reached the warning fraction of its budget."""


def _number(value: Any, what: str, env: str | None = None) -> float | None:
    if value is None and env is not None:
        raw = os.environ.get(env)
        if raw is None or raw.strip() == "":
            return None
        value, what = raw, f"{env}"
    return _amount(value, what)


def _amount(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{what} must be a number of US dollars, got {value!r}")
    if not math.isfinite(number) or number < 0:
        raise BadInput(f"{what} must be a finite number >= 0, got {value!r}")
    return number


class CostMeter:
    """Cost so far in USD, carried across attempts and checkpoints (see the module doc)."""

    def __init__(
        self,
        hourly_price: float | None = None,
        *,
        budget_usd: float | None = None,
        offset_usd: float | None = None,
        warn_fraction: float = 0.9,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.hourly_price = _number(hourly_price, "hourly_price", ENV_HOURLY_PRICE) or 0.0
        self.budget_usd = _number(budget_usd, "budget_usd", ENV_BUDGET_USD)
        self.offset_usd = _number(offset_usd, "offset_usd", ENV_COST_OFFSET) or 0.0
        self._initial_offset = self.offset_usd
        if not 0 < warn_fraction <= 1:
            raise BadInput(f"warn_fraction must be in (0, 1], got {warn_fraction!r}")
        self.warn_fraction = warn_fraction
        self._clock = clock
        self._started = clock()
        self._warned = False
        self._stopped = False

    def elapsed_s(self) -> float:
        """Seconds metered by this process."""
        return max(self._clock() - self._started, 0.0)

    def cost_usd(self) -> float:
        """Cost so far: earlier attempts plus this process's time at the hourly price."""
        return self.offset_usd + self.hourly_price * self.elapsed_s() / 3600.0

    def fraction(self) -> float | None:
        """Cost as a fraction of the budget (None without a budget)."""
        if not self.budget_usd:
            return None if self.budget_usd is None else math.inf
        return self.cost_usd() / self.budget_usd

    def check(self, step: int | None = None) -> bool:
        """Warn once at ``warn_fraction`` of the budget, ask the loop to stop at 100%.

        Returns True when the budget is used up (and :func:`~corral.sdk.signals.request_stop`
        has been called).
        """
        frac = self.fraction()
        if frac is None:
            return False
        cost = self.cost_usd()
        if frac >= self.warn_fraction and not self._warned:
            self._warned = True
            warnings.warn(
                f"cost ${cost:.2f} is {frac:.0%} of the ${self.budget_usd:.2f} budget",
                BudgetWarning,
                stacklevel=2,
            )
            progress_file.emit(
                "metrics",
                step=step,
                metrics={"cost_usd": cost, "budget_usd": self.budget_usd, "budget_fraction": frac},
            )
        if frac >= 1.0:
            if not self._stopped:
                self._stopped = True
                signals.request_stop("budget")
            return True
        return False

    def clear_stop(self) -> None:
        """Forget that this meter asked the loop to stop (a new ``trainer.train()`` after a
        budget stop, with a budget raised since): the next :meth:`check` asks again if the
        budget is still used up. The stop request itself is cleared with
        :func:`corral.sdk.signals.clear_stop_request`."""
        self._stopped = False

    def as_metrics(self) -> dict[str, float]:
        """``{"cost_usd": ...}`` to log with the training metrics."""
        return {"cost_usd": round(self.cost_usd(), 6)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "cost_usd": self.cost_usd(),
            "hourly_price": self.hourly_price,
            "budget_usd": self.budget_usd,
            "warned": self._warned,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's cost: from max(saved cost, offset of this attempt).

        The time this process has metered so far is still added on top. Only ``cost_usd`` is
        required; the price and budget of *this* attempt are kept (the offer may differ). A
        budget warning already given is not repeated while it still applies: ``warned`` from
        :meth:`state_dict`, or, for a bare cost (``{"cost_usd": info["cost_usd"]}`` from
        :func:`~corral.sdk.resume.training_state`), a saved cost already past the warning
        fraction of this budget (the earlier attempt's checks warned when it got there)."""
        if not isinstance(state, dict) or "cost_usd" not in state:
            raise BadInput("CostMeter.load_state_dict needs a dict with 'cost_usd'")
        saved = 0.0 if state["cost_usd"] is None else _amount(state["cost_usd"], "saved cost_usd")
        self.offset_usd = max(saved, self._initial_offset)
        warned = state.get("warned")
        if warned is None and self.budget_usd is not None:
            warned = saved >= self.warn_fraction * self.budget_usd and saved > 0
        if warned:
            frac = self.fraction()
            self._warned = self._warned or (frac is not None and frac >= self.warn_fraction)

    def __repr__(self) -> str:
        return (
            f"CostMeter(${self.cost_usd():.4f}, ${self.hourly_price}/h, budget={self.budget_usd})"
        )
