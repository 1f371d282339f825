"""What submitting a run returns (``corral launch``): frozen dataclasses, free of pydantic,
because they sit on the path from ``corral launch`` to the first line of user code, where
every millisecond of start-up counts (``benchmarks/launch_overhead.py``).

``to_json()`` gives the same document the pydantic views gave before (field order included).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from corral.service.run_view import RunView


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetWarning:
    """The cheapest offer for the whole ``limits.max_runtime`` costs more than the budget:
    the run will be stopped at the budget (``hours_at_budget`` in)."""

    provider: str
    price_per_hour: float
    hours: float
    worst_cost_usd: float
    budget_usd: float
    hours_at_budget: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """What submitting a run did: the run as it is right after its first launch, warnings
    for the user, and notices about the controller (e.g. restarted with new settings)."""

    run: RunView
    warnings: list[BudgetWarning] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_json(),
            "warnings": [w.to_json() for w in self.warnings],
            "notices": list(self.notices),
        }
