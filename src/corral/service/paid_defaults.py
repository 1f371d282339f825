"""What a paid run gets when its spec leaves it out: a money cap (``budget.max_cost_usd``) and
an idle stop (``limits.idle_timeout``).

A forgotten field must not mean no money stop at all (the RunPod guide caps every run at $10
and warns at 90 %). So a run whose offers cost money (any offer with a price per hour) and
whose spec does not name ``budget.max_cost_usd`` gets ``CORRAL_DEFAULT_MAX_COST_USD`` dollars
(default :data:`DEFAULT_MAX_COST_USD`; ``none`` turns the default off), warned at
``CORRAL_DEFAULT_WARN_AT`` (default the spec's ``warn_at``, 0.9) unless the spec sets
``warn_at``. ``budget: {max_cost_usd: null}`` opts out explicitly. A run on machines that cost
nothing (the local provider, a team's pool) gets no default.

The choice is applied to the spec the run is created with (so the budget watcher, the plan and
the dashboard see one number), said at launch, and recorded as a ``budget.set`` event, which
``corral status`` reads to say where the cap came from.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from corral.errors import BadInput
from corral.providers.base import Offer
from corral.spec import JobSpec

ENV_DEFAULT_MAX_COST = "CORRAL_DEFAULT_MAX_COST_USD"
ENV_DEFAULT_WARN_AT = "CORRAL_DEFAULT_WARN_AT"
DEFAULT_MAX_COST_USD = 10.0
#: the store event that records the choice (data: max_cost_usd, warn_at, source)
BUDGET_SET = "budget.set"

Source = Literal["spec", "default", "opted out", "free", "no default"]


@dataclass(frozen=True)
class BudgetChoice:
    max_cost_usd: float | None
    warn_at: float
    source: Source

    def notice(self) -> str | None:
        """What ``corral launch`` says about it (None: nothing worth saying)."""
        if self.source == "default":
            return (
                f"budget: the spec sets no budget.max_cost_usd: the default cap "
                f"${self.max_cost_usd:.2f} applies, warning at {self.warn_at:.0%} "
                f"({ENV_DEFAULT_MAX_COST} sets it; `budget: {{max_cost_usd: null}}` opts out)"
            )
        if self.source == "opted out":
            return "budget: none (budget.max_cost_usd is null): nothing stops this run for money"
        return None

    def data(self) -> dict[str, Any]:
        return {"max_cost_usd": self.max_cost_usd, "warn_at": self.warn_at, "source": self.source}


def _number(
    environ: Mapping[str, str], name: str, low: float, high: float, what: str
) -> float | None:
    """The variable's number; None when unset, NaN for ``none``/``off``."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    if raw.lower() in ("none", "off"):
        return math.nan
    try:
        value = float(raw)
    except ValueError:
        value = math.inf
    if not (low < value <= high):
        raise BadInput(f"{name}: {raw!r} is not {what} (or 'none')")
    return value


def choose(
    spec: JobSpec, offers: Sequence[Offer], environ: Mapping[str, str] | None = None
) -> tuple[JobSpec, BudgetChoice]:
    """The spec with its budget decided (the default applied where it applies) and the
    choice. ``offers``: those the run can land on (the plan's)."""
    env = os.environ if environ is None else environ
    budget = spec.budget
    given = "max_cost_usd" in budget.model_fields_set
    if given:
        source: Source = "spec" if budget.max_cost_usd is not None else "opted out"
        return spec, BudgetChoice(budget.max_cost_usd, budget.warn_at, source)
    if not any(o.price_per_hour > 0 for o in offers):
        return spec, BudgetChoice(None, budget.warn_at, "free")
    cap = _number(env, ENV_DEFAULT_MAX_COST, 0.0, 1e9, "an amount of dollars above 0")
    if cap is not None and math.isnan(cap):
        return spec, BudgetChoice(None, budget.warn_at, "no default")
    warn = budget.warn_at
    if "warn_at" not in budget.model_fields_set:
        default_warn = _number(env, ENV_DEFAULT_WARN_AT, 0.0, 1.0, "a fraction in (0, 1]")
        if default_warn is not None and not math.isnan(default_warn):
            warn = default_warn
    cap = DEFAULT_MAX_COST_USD if cap is None else cap
    decided = budget.model_copy(update={"max_cost_usd": cap, "warn_at": warn})
    return spec.model_copy(update={"budget": decided}), BudgetChoice(cap, warn, "default")


ENV_DEFAULT_IDLE = "CORRAL_DEFAULT_IDLE_TIMEOUT"
#: the idle stop of a paid run whose spec names no ``limits.idle_timeout`` (the AWS guide's
#: 30 minutes of inactivity): CPU, memory, GPUs and progress all quiet that long
DEFAULT_IDLE_TIMEOUT_S = 1800.0


def choose_idle(
    spec: JobSpec, offers: Sequence[Offer], environ: Mapping[str, str] | None = None
) -> tuple[JobSpec, str | None]:
    """The spec with ``limits.idle_timeout`` decided: unset on a paid run, the default
    (``CORRAL_DEFAULT_IDLE_TIMEOUT`` seconds, or a duration like ``45m``; ``none``: no
    default); ``null`` in the spec opts out; a job with a service stage gets none (a quiet
    server is not idle). The notice for the launch, if any."""
    from corral.spec.units import parse_duration

    env = os.environ if environ is None else environ
    limits = spec.limits
    if "idle_timeout" in limits.model_fields_set:
        return spec, None
    if not any(o.price_per_hour > 0 for o in offers):
        return spec, None
    if any(stage.service is not None for stage in spec.stage_list()):
        return spec, None  # a quiet server is serving, not idle: only an explicit limit
    raw = env.get(ENV_DEFAULT_IDLE, "").strip()
    if raw.lower() in ("none", "off"):
        return spec, None
    seconds = DEFAULT_IDLE_TIMEOUT_S
    if raw:
        try:
            seconds = float(parse_duration(raw))
        except (TypeError, ValueError):
            seconds = -1.0
        if seconds <= 0:
            raise BadInput(
                f"{ENV_DEFAULT_IDLE}: {raw!r} is not a duration (30m, 1h, 1800) or 'none'"
            )
    decided = limits.model_copy(update={"idle_timeout": seconds})
    notice = (
        f"idle: the spec sets no limits.idle_timeout: the run stops after {seconds / 60:g} min "
        f"with no progress, GPU, CPU or memory activity ({ENV_DEFAULT_IDLE} sets it; "
        "`limits: {idle_timeout: null}` opts out)"
    )
    return spec.model_copy(update={"limits": decided}), notice


def status_line(choice: Mapping[str, Any] | None, spec: Mapping[str, Any] | None) -> str | None:
    """``corral status``'s budget line: the cap and where it came from (the ``budget.set``
    event's data, else the spec's own budget); None without a cap or a choice worth saying."""
    if choice is None:
        budget = (spec or {}).get("budget") or {}
        cap = budget.get("max_cost_usd")
        if cap is None:
            return None
        choice = {"max_cost_usd": cap, "warn_at": budget.get("warn_at", 0.9), "source": "spec"}
    cap, warn, source = choice.get("max_cost_usd"), choice.get("warn_at"), choice.get("source")
    if source == "opted out":
        return "none (opted out: budget.max_cost_usd is null)"
    if cap is None:
        return None
    text = f"${float(cap):.2f}, warning at {float(warn or 0.9):.0%}"
    if source == "default":
        text += f" (the default: {ENV_DEFAULT_MAX_COST})"
    return text
