"""The ``sweep:`` section of a job spec: a hyperparameter search whose trials are corral runs.

::

    name: lr-search
    run: python train.py
    sweep:
      parameters:                       # --set paths of the job spec, each with its space
        env.LR: {low: 1.0e-5, high: 1.0e-2, log: true}
        env.LAYERS: {values: [2, 4, 8]}
      metric: {name: loss, goal: minimize}   # a metric the trials report (sdk.report / progress)
      search: tpe                       # grid | random | tpe (Optuna's samplers)
      max_trials: 16
      max_parallel: 2
      budget: {max_cost_usd: 20}        # one budget for the whole sweep
      prune: {pruner: median}           # median | asha | none (Optuna's pruners)

Every field is checked here (one line per problem, naming the field); that each parameter's
path exists in the job spec is checked against the job spec itself
(:func:`corral.sweep.trials.trial_spec`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from corral.spec.fields import Label, PositiveFloat
from corral.spec.models import SpecModel

#: the most trials one sweep runs, and at once
MAX_TRIALS = 10_000
MAX_PARALLEL = 256
Scalar = str | int | float | bool


class Parameter(SpecModel):
    """One parameter's space: ``values`` (choices), or ``low``/``high`` (a range; ``log``:
    sampled on a log scale; ``int``: whole numbers)."""

    values: list[Scalar] | None = Field(None, min_length=1, max_length=1000)
    low: float | None = None
    high: float | None = None
    log: bool = False
    int_: bool = Field(False, alias="int")

    @model_validator(mode="after")
    def _check(self) -> Parameter:
        ranged = self.low is not None or self.high is not None
        if self.values is not None and ranged:
            raise ValueError("give either `values` or `low`/`high`, not both")
        if self.values is None and not ranged:
            raise ValueError("give `values` (choices) or `low` and `high` (a range)")
        if self.values is not None:
            if len({repr(v) for v in self.values}) != len(self.values):
                raise ValueError("`values` repeats a value")
            return self
        if self.low is None or self.high is None:
            raise ValueError("a range needs both `low` and `high`")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low >= self.high:
            raise ValueError(
                f"the range is empty: low {self.low:g} must be below high {self.high:g}"
            )
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        if self.int_ and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("an `int` range needs whole `low` and `high`")
        return self


class Metric(SpecModel):
    """What the search optimises: a metric the trials report."""

    name: str = Field(
        min_length=1,
        max_length=100,
        description="`loss`, or a metric name trials report (sdk.report(metrics=...), a "
        "progress pattern's named group).",
    )
    goal: Literal["minimize", "maximize"] = "minimize"


class SweepBudget(SpecModel):
    """One budget for the whole sweep."""

    max_cost_usd: PositiveFloat | None = Field(None, description="Dollars over every trial.")
    max_hours: PositiveFloat | None = Field(None, description="Wall hours from the launch.")


class Prune(SpecModel):
    """Stopping bad trials early: a trial's metric at a step is compared with its peers'."""

    pruner: Literal["median", "asha", "none"] = "median"
    warmup_steps: Annotated[int, Field(ge=0), Label("whole number >= 0")] = Field(
        0, description="Never prune before this step."
    )
    min_trials: Annotated[int, Field(ge=1), Label("whole number >= 1")] = Field(
        2, description="Trials that must have finished before any is pruned."
    )


class SweepSpec(SpecModel):
    """The search: parameters, metric, sampler, limits, budget and pruning."""

    parameters: dict[
        Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z_][\w.\[\]-]*$")],
        Parameter,
    ] = Field(min_length=1, max_length=32, description="`--set` paths and their spaces.")
    metric: Metric
    search: Literal["grid", "random", "tpe"] = "tpe"
    max_trials: Annotated[int, Field(ge=1, le=MAX_TRIALS), Label("whole number 1-10000")] = 16
    max_parallel: Annotated[int, Field(ge=1, le=MAX_PARALLEL), Label("whole number 1-256")] = 1
    budget: SweepBudget = Field(default_factory=SweepBudget)
    prune: Prune = Field(default_factory=Prune)
    seed: int = 0

    @model_validator(mode="after")
    def _grid(self) -> SweepSpec:
        if self.search == "grid":
            ranged = [k for k, p in self.parameters.items() if p.values is None]
            if ranged:
                raise ValueError(
                    f"a grid search needs `values` for every parameter; {', '.join(ranged)} "
                    "has a range (use search: random or tpe, or list its values)"
                )
        return self

    def grid_size(self) -> int:
        size = 1
        for p in self.parameters.values():
            size *= len(p.values or [])
        return size

    def shown(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
