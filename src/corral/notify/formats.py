"""Webhook payload formats other than corral's own (``notify.webhooks[].format``).

``salad-compatible``: the shape SaladCloud's job guides post to their progress receivers, so
a receiver written for one of those guides parses corral's webhooks unchanged::

    {"status": "running", "message": "train: 42.0% (step 420/1000), loss 0.731",
     "timestamp": "2026-11-25T21:30:00.123Z",
     "data": {"gpu_usage": "97,95", "stage": "train", "progress_percent": 42.0,
              "run_id": "...", "run_name": "...", "attempt": 1, "event": "progress",
              "delivery_id": "...", "cost_usd": 0.41}}

``status`` per event: ``run.started``, ``stage.started``, ``progress``, ``checkpoint.saved``
-> ``running``; ``stage.finished`` -> ``running``, or ``failed`` for a failed stage;
``run.recovering`` -> ``recovering``; ``budget.warning`` -> ``warning``; ``run.finished`` ->
``completed`` (succeeded), ``failed``, ``cancelled`` or ``stopped``. ``gpu_usage`` is the
utilisation (%) of each GPU of the machine, comma separated, in progress events (``""``
otherwise). The signature headers and the delivery id are corral's, as in every format.
"""

from __future__ import annotations

from typing import Any

from corral.errors import BadInput

FORMATS = ("corral", "salad-compatible")


def check(spec: Any) -> None:
    """:class:`BadInput` naming ``notify.webhooks[i].format`` when a webhook of the job spec
    asks for a format this module does not know (the spec checks only its shape)."""
    for i, hook in enumerate(getattr(getattr(spec, "notify", None), "webhooks", None) or []):
        if hook.format not in FORMATS:
            raise BadInput(
                f"notify.webhooks[{i}].format: unknown format {hook.format!r} "
                f"(known: {', '.join(FORMATS)})",
                fields={"field": f"notify.webhooks[{i}].format", "known": list(FORMATS)},
            )


_FINISHED = {
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "stopped": "stopped",
}


def convert(payload: dict[str, Any], fmt: str) -> dict[str, Any]:
    """``payload`` (corral's, from :func:`corral.notify.payloads.build`) in format ``fmt``."""
    if fmt == "salad-compatible":
        return salad(payload)
    return payload


def _percent(data: dict[str, Any]) -> float | None:
    value = data.get("percent")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(float(value), 2)
    step, total = data.get("step"), data.get("total")
    if isinstance(step, int | float) and isinstance(total, int | float) and total:
        return round(100.0 * float(step) / float(total), 2)
    return None


def _status(kind: str, data: dict[str, Any]) -> str:
    if kind == "run.finished":
        return _FINISHED.get(str(data.get("state") or "").lower(), "failed")
    if kind == "run.recovering":
        return "recovering"
    if kind == "budget.warning":
        return "warning"
    if kind == "stage.finished" and str(data.get("state") or "") == "failed":
        return "failed"
    return "running"


def _message(kind: str, data: dict[str, Any], reason: str | None, percent: float | None) -> str:
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
    if kind == "run.recovering":
        return f"recovering after a {data.get('kind') or 'failure'}" + (
            f": {reason}" if reason else ""
        )
    return reason or kind


def salad(payload: dict[str, Any]) -> dict[str, Any]:
    kind = str(payload.get("type"))
    data = dict(payload.get("data") or {})
    percent = (
        _percent(data)
        if kind == "progress"
        else (100.0 if kind == "run.finished" and _status(kind, data) == "completed" else None)
    )
    usage = [g.get("utilization_pct") for g in data.get("gpus") or [] if isinstance(g, dict)]
    run = payload.get("run") or {}
    out: dict[str, Any] = {
        "gpu_usage": ",".join(f"{u:g}" if isinstance(u, int | float) else "" for u in usage),
        "stage": data.get("stage") or "",
        "progress_percent": percent,
        "run_id": run.get("id"),
        "run_name": run.get("name"),
        "attempt": payload.get("attempt"),
        "event": kind,
        "delivery_id": payload.get("id"),
    }
    for extra in ("cost_usd", "step", "total", "loss", "exit_code", "state"):
        if extra in data:
            out[extra] = data[extra]
    return {
        "status": _status(kind, data),
        "message": _message(kind, data, payload.get("reason"), percent),
        "timestamp": payload.get("ts"),
        "data": out,
    }
