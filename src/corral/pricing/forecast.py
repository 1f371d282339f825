"""What a run will cost in all and when it will be done, from its progress rate and its price.

The agent works out each running stage's ETA from the stage's own progress records (steps per
second, ``corral.agent.progress``); a run's forecast is its cost so far plus its current price
over the longest ETA of its running stages. Stages that have not started yet are not in it (a
pipeline's forecast grows as each stage starts). No forecast before a stage is
:data:`MIN_FRACTION` of the way (an early rate is noise: data loading, compilation, warm-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: no forecast before the running stages are this far (fraction of their total)
MIN_FRACTION = 0.10


@dataclass(frozen=True)
class Forecast:
    cost_usd: float  # expected total of the run
    finish_in_s: float  # seconds to the end of its running stages
    fraction: float  # how far the least advanced running stage is

    def to_json(self) -> dict[str, Any]:
        return {
            "cost_usd": round(self.cost_usd, 4),
            "finish_in_s": round(self.finish_in_s, 1),
            "fraction": round(self.fraction, 4),
        }


def fraction_done(progress: dict[str, Any]) -> float | None:
    """How far a progress record is (0..1): its ``percent``, else ``step / total``; None when
    it says neither. Webhook messages show the same number as a percentage."""
    percent = progress.get("percent")
    if isinstance(percent, int | float) and not isinstance(percent, bool):
        return float(percent) / 100.0
    step, total = progress.get("step"), progress.get("total")
    if isinstance(step, int | float) and isinstance(total, int | float) and total:
        return float(step) / float(total)
    return None


def forecast(
    cost_usd: float, price_per_hour: float, status: dict[str, Any] | None
) -> Forecast | None:
    """The forecast from the run's cost so far, its current price and its agent's last status
    (the stages as ``AgentStatus`` serialises them); None while no running stage has an ETA
    or one is less than :data:`MIN_FRACTION` of the way."""
    running = [
        s
        for s in (status or {}).get("stages") or []
        if isinstance(s, dict) and s.get("state") == "running"
    ]
    etas: list[float] = []
    fractions: list[float] = []
    for stage in running:
        progress = stage.get("progress") or {}
        eta, fraction = progress.get("eta_s"), fraction_done(progress)
        if not isinstance(eta, int | float) or fraction is None:
            continue
        etas.append(max(0.0, float(eta)))
        fractions.append(min(1.0, max(0.0, fraction)))
    if not etas or min(fractions) < MIN_FRACTION:
        return None
    finish = max(etas)
    return Forecast(cost_usd + max(0.0, price_per_hour) * finish / 3600.0, finish, min(fractions))
