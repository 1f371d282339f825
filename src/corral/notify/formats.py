"""Webhook payload formats other than corral's own (``notify.webhooks[].format``): this one
for SaladCloud's guides' receivers, :mod:`corral.notify.chat` for Slack, Discord and Teams.

``salad-compatible``: the shape SaladCloud's job guides post to their progress receivers, so
a receiver written for one of those guides parses corral's webhooks unchanged::

    {"status": "progress", "message": "train: 42.0% (step 420/1000), loss 0.731",
     "timestamp": "2026-11-25T21:30:00.123Z",
     "data": {"gpu_usage": "97,95", "stage": "train", "progress_percent": 42.0,
              "run_id": "...", "run_name": "...", "attempt": 1, "event": "progress",
              "delivery_id": "...", "cost_usd": 0.41}}

``status`` per event: ``progress`` -> ``progress`` (what the guides' receivers look for);
``run.started``, ``stage.started``, ``checkpoint.saved`` -> ``running``; ``stage.finished`` -> ``running``, or ``failed`` for a failed stage;
``run.recovering`` -> ``recovering``; ``budget.warning`` -> ``warning``; ``run.finished`` ->
``completed`` (succeeded), ``failed``, ``cancelled`` or ``stopped``. ``gpu_usage`` is the
utilisation (%) of each GPU of the machine, comma separated, in progress events (``""``
otherwise). The signature headers and the delivery id are corral's, as in every format.
"""

from __future__ import annotations

from typing import Any

from corral.errors import BadInput
from corral.notify.describe import message_of, percent_of, status_of

FORMATS = ("corral", "salad-compatible", "slack", "discord", "teams")
#: where the team server's pages are, as people reach them (a chat message links the run)
ENV_PUBLIC_URL = "CORRAL_PUBLIC_URL"


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


def convert(payload: dict[str, Any], fmt: str, public_url: str | None = None) -> dict[str, Any]:
    """``payload`` (corral's, from :func:`corral.notify.payloads.build`) in format ``fmt``;
    ``public_url``: the team server's address, for the chat formats' link to the run."""
    if fmt == "salad-compatible":
        return salad(payload)
    if fmt in ("slack", "discord", "teams"):
        from corral.notify import chat

        return getattr(chat, fmt)(payload, public_url)
    return payload


def salad(payload: dict[str, Any]) -> dict[str, Any]:
    kind = str(payload.get("type"))
    data = dict(payload.get("data") or {})
    percent = (
        percent_of(data)
        if kind == "progress"
        else (100.0 if kind == "run.finished" and status_of(kind, data) == "completed" else None)
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
        "status": status_of(kind, data),
        "message": message_of(kind, data, payload.get("reason"), percent),
        "timestamp": payload.get("ts"),
        "data": out,
    }
