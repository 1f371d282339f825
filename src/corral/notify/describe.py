"""One event of a run in words: the status word and the one-line message the webhook formats
for people (``salad-compatible``, ``slack``, ``discord``, ``teams``) show."""

from __future__ import annotations

from typing import Any

from corral.pricing.forecast import fraction_done

_FINISHED = {
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "stopped": "stopped",
}


def percent_of(data: dict[str, Any]) -> float | None:
    """The progress record's percentage (two decimals), as the forecast reads it."""
    fraction = fraction_done(data)
    return None if fraction is None else round(100.0 * fraction, 2)


def status_of(kind: str, data: dict[str, Any]) -> str:
    if kind == "run.finished":
        return _FINISHED.get(str(data.get("state") or "").lower(), "failed")
    if kind == "progress":
        return "progress"
    if kind == "run.recovering":
        return "recovering"
    if kind in ("budget.warning", "budget.forecast", "budget.cap_warning"):
        return "warning"
    if kind == "stage.finished" and str(data.get("state") or "") == "failed":
        return "failed"
    return "running"


def message_of(kind: str, data: dict[str, Any], reason: str | None, percent: float | None) -> str:
    stage = data.get("stage")
    if kind == "progress":
        text = f"{stage}: {percent:.1f}%" if percent is not None else f"{stage}: running"
        if data.get("step") is not None:
            total = f"/{data['total']}" if data.get("total") is not None else ""
            text += f" (step {data['step']}{total})"
        if isinstance(data.get("loss"), int | float):
            text += f", loss {data['loss']:.4g}"
        return text
    if kind == "stage.started":
        return f"stage {stage} started"
    if kind == "stage.finished":
        return f"stage {stage} {data.get('state') or 'finished'}"
    if kind == "checkpoint.saved":
        return f"{stage}: checkpoint at step {data.get('step')}"
    if kind == "run.finished":
        cost = data.get("cost_usd")
        spent = f", cost ${cost:.2f}" if isinstance(cost, int | float) else ""
        return f"run {str(data.get('state') or 'finished').lower()}{spent}" + (
            f": {reason}" if reason else ""
        )
    if kind == "budget.warning":
        return f"budget: ${data.get('cost_usd')} of ${data.get('budget_usd')} spent"
    if kind == "budget.forecast":
        return (
            f"budget: forecast ${data.get('forecast_cost_usd')} in all, over the "
            f"${data.get('budget_usd')} budget"
        )
    if kind == "budget.cap_warning":
        found = data.get("cap")
        cap: dict[str, Any] = found if isinstance(found, dict) else {}
        who = cap.get("subject") or "the team"
        return (
            f"spending cap of {who} ({cap.get('period')}): ${data.get('spent_usd')} of "
            f"${data.get('cap_usd')} spent"
        )
    if kind == "sweep.finished":
        best = data.get("best_trial")
        said = f", best trial {best}: {data.get('best_value')}" if best is not None else ""
        return f"sweep {data.get('sweep')} {str(data.get('state') or '').lower()}{said}"
    if kind == "run.recovering":
        return f"recovering after a {data.get('kind') or 'failure'}" + (
            f": {reason}" if reason else ""
        )
    return reason or kind
