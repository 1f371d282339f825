"""From store events to webhook payloads.

Only the events named in the spec (``corral.spec.models.EVENTS``) become webhooks, and each
payload carries a fixed list of fields per event type: nothing else from an event's data (no
commands, no environment, no paths of the controller's machine) can reach a receiver.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from corral.errors import NotFound
from corral.pricing.forecast import forecast
from corral.spec.models import ALL_EVENTS, EVENTS
from corral.store.records import AttemptRecord, EventRecord, RunRecord
from corral.wire.outcome import AttemptOutcome

if TYPE_CHECKING:
    from corral.store.store import Store

log = logging.getLogger("corral.notify")

WEBHOOK_EVENTS = frozenset(EVENTS)
#: Delivery ids are uuid5 of "<run>/<webhook>/<event>" in this namespace: the same for every
#: retry and after a restart, so a receiver can drop the duplicates at-least-once may bring.
DELIVERY_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://corral.dev/webhooks")

#: The fields of an event's data that a payload carries, per event type.
FIELDS: dict[str, tuple[str, ...]] = {
    "run.started": ("nodes",),
    "stage.started": ("stage", "gpus"),
    "stage.finished": ("stage", "state", "exit_code", "duration_s"),
    "progress": ("stage", "step", "total", "percent", "loss", "metrics", "eta_s"),
    "checkpoint.saved": ("stage", "step", "metrics"),
    "run.recovering": ("kind", "exit_code", "node"),
    "budget.warning": ("cost_usd", "budget_usd", "fraction"),
    "budget.forecast": ("cost_usd", "budget_usd", "forecast_cost_usd", "finish_in_s", "progress"),
    "budget.cap_warning": ("cap", "cap_usd", "spent_usd", "warn_at"),
    "run.finished": ("state", "cost_usd"),
    "sweep.finished": (
        "sweep",
        "state",
        "trials",
        "spent_usd",
        "best_trial",
        "best_value",
        "best_params",
    ),
}
GPU_FIELDS = ("id", "utilization_pct", "memory_used_mb", "memory_total_mb")
#: The events that say how an attempt or the run ended: their payload describes the end from
#: the attempt's own outcome (``attempt.data["outcome"]``, decided once by corral.wire.outcome).
OUTCOME_EVENTS = frozenset({"run.recovering", "run.finished"})
#: What ``data.outcome`` carries of an :class:`~corral.wire.outcome.AttemptOutcome`.
OUTCOME_FIELDS = ("kind", "cause", "exit_code", "failed_stage")


@dataclass(frozen=True)
class Hook:
    """One entry of a run's ``notify.webhooks``."""

    index: int
    url: str
    secret: str | None  # the secret's NAME
    events: frozenset[str]
    progress_interval: float
    format: str = "corral"

    def wants(self, event_type: str) -> bool:
        return ALL_EVENTS in self.events or event_type in self.events

    @property
    def label(self) -> str:
        """How the webhook is named in events and logs: its index and scheme://host only (a
        URL's path or query may hold a token, as Slack's and Discord's do)."""
        return f"webhook #{self.index} ({redact_url(self.url)})"


def hooks_of(spec: dict[str, Any] | None) -> list[Hook]:
    """The webhooks of a run's resolved spec (as stored on the run)."""
    from corral.spec.models import Webhook

    raw = ((spec or {}).get("notify") or {}).get("webhooks") or []
    hooks = []
    for i, entry in enumerate(raw):
        try:
            w = Webhook.model_validate(entry)
        except Exception as e:  # validated at launch; a newer or hand-edited spec is skipped
            log.warning("webhook #%d of the run is invalid, skipped: %s", i, type(e).__name__)
            continue
        hooks.append(
            Hook(i, w.url, w.secret, frozenset(w.events), float(w.progress_interval), w.format)
        )
    return hooks


def redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "?"
    return f"{parts.scheme}://{host}{port}"


def delivery_id(run_id: str, webhook: int, event_id: int) -> str:
    return str(uuid.uuid5(DELIVERY_NAMESPACE, f"{run_id}/{webhook}/{event_id}"))


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build(
    event: EventRecord,
    *,
    run_name: str,
    webhook: int,
    live: dict[str, Any] | None = None,
    outcome: AttemptOutcome | None = None,
) -> dict[str, Any]:
    """The JSON payload of one webhook delivery. ``live`` (progress only): ``cost_usd`` and
    ``gpus`` from the run and its latest agent status. ``outcome`` (``run.recovering``,
    ``run.finished``): how the attempt ended, from :func:`outcome_for`; it gives the
    recovering attempt's ``kind`` and ``exit_code`` and the ``outcome`` field."""
    fields = FIELDS[event.type]
    data = {k: event.data.get(k) for k in fields if k in event.data}
    if event.type == "progress":
        live = live or {}
        data["cost_usd"] = live.get("cost_usd")
        data["gpus"] = live.get("gpus") or []
        if live.get("forecast_cost_usd") is not None:
            data["forecast_cost_usd"] = live["forecast_cost_usd"]
    if event.type in OUTCOME_EVENTS and outcome is not None:
        described = outcome.model_dump(mode="json")
        if event.type == "run.recovering":
            data["kind"], data["exit_code"] = described["kind"], described["exit_code"]
        data["outcome"] = {k: described[k] for k in OUTCOME_FIELDS}
    return {
        "id": delivery_id(event.run_id, webhook, event.id),
        "type": event.type,
        "ts": iso(event.ts),
        "run": {"id": event.run_id, "name": run_name},
        "attempt": event.attempt,
        "reason": event.reason,
        "data": data,
    }


def outcome_of(attempt: AttemptRecord | None) -> AttemptOutcome | None:
    """The attempt's typed outcome as the controller recorded it (None: not ended yet, or
    written by an older corral)."""
    if attempt is None:
        return None
    raw = (attempt.data or {}).get("outcome")
    if not raw:
        return None
    try:
        return AttemptOutcome.model_validate(raw)
    except ValidationError:
        log.warning("attempt %s of run %s: unreadable outcome", attempt.number, attempt.run_id)
        return None


def outcome_for(store: Store, event: EventRecord) -> AttemptOutcome | None:
    """The outcome an ``OUTCOME_EVENTS`` event describes: its attempt's, or for a run-level
    event (``run.finished``) the run's last attempt's. None for other events, a run that
    ended before any attempt, or an attempt without a recorded outcome."""
    if event.type not in OUTCOME_EVENTS:
        return None
    try:
        number = event.attempt or store.get_run(event.run_id).attempt
        return outcome_of(store.get_attempt(event.run_id, number)) if number else None
    except NotFound:
        return None


def live_status(run: RunRecord, attempt: AttemptRecord | None) -> dict[str, Any]:
    """What a progress payload adds from the store: the run's cost so far and per-GPU usage
    from the attempt's cached agent status (``attempt.data["status"]["gpus"]``)."""
    gpus = []
    status = ((attempt.data or {}).get("status") or {}) if attempt is not None else {}
    for g in status.get("gpus") or []:
        if isinstance(g, dict):
            gpus.append({k: g.get(k) for k in GPU_FIELDS})
    out: dict[str, Any] = {"cost_usd": round(float(run.cost_usd or 0.0), 6), "gpus": gpus}
    price = float(attempt.price_per_hour or 0.0) if attempt is not None else 0.0
    ahead = forecast(float(run.cost_usd or 0.0), price, status)
    if ahead is not None:
        out["forecast_cost_usd"] = round(ahead.cost_usd, 4)
    return out


def scrub(value: Any, secret: str) -> Any:
    """``value`` with every occurrence of ``secret`` in its strings replaced by ``***``."""
    if isinstance(value, str):
        return value.replace(secret, "***")
    if isinstance(value, dict):
        return {scrub(k, secret): scrub(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secret) for v in value]
    return value


def encode(payload: dict[str, Any], secret: str | None) -> bytes:
    """The request body. A payload never carries a secret value: the webhook's own secret is
    scrubbed from it should a reason or a metric name ever contain it, and so is every secret
    value in play (``corral.secrets.redact_data``: the store, credentials, resolved secrets)."""
    from corral.secrets.redact import redact_data

    if secret and len(secret) >= 4:
        payload = scrub(payload, secret)
    payload = redact_data(payload)
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")
