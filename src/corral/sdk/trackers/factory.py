"""Build trackers from the job spec's ``trackers`` list (or the ``CORRAL_TRACKERS`` JSON).

Each entry is a dict (or a pydantic model) with ``type`` (``wandb``, ``mlflow``, ``jsonl`` or
``null``) and, where they apply, ``project`` (the W&B project / MLflow experiment),
``tracking_uri`` (MLflow), ``mode`` (W&B: ``online``, ``offline``, ``disabled``), ``entity``
(W&B) and ``path`` (JSONL). Unknown types and keys are :class:`corral.errors.BadInput`.
Building a W&B or MLflow tracker is retried on transient errors (network, disk).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from corral.errors import BadInput
from corral.sdk import retry
from corral.sdk.trackers.base import CompositeTracker, NullTracker, Tracker
from corral.secrets.redact import redact

__all__ = ["TrackerSpec", "build_tracker", "make_trackers"]

log = logging.getLogger("corral.sdk.trackers")


class TrackerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["wandb", "mlflow", "jsonl", "null"]
    project: str | None = None
    tracking_uri: str | None = None
    mode: Literal["online", "offline", "disabled"] | None = None
    entity: str | None = None
    path: str | None = None


def _spec(raw: Any) -> TrackerSpec:
    if isinstance(raw, TrackerSpec):
        return raw
    if hasattr(raw, "model_dump"):
        raw = raw.model_dump(exclude_none=True)
    if not isinstance(raw, dict):
        raise BadInput(f"tracker spec must be a mapping with a 'type', got {raw!r}")
    try:
        return TrackerSpec.model_validate({k: v for k, v in raw.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "tracker"
        raise BadInput(f"tracker spec {raw.get('type', '?')!r}: {where}: {first['msg']}")


@retry(attempts=3, base=1.0, max_delay=10, on=(OSError, ConnectionError, TimeoutError))
def build_tracker(raw: Any) -> Tracker:
    """One tracker from one spec entry."""
    spec = _spec(raw)
    if spec.type == "wandb":
        from corral.sdk.trackers.wandb_sink import WandbTracker

        return WandbTracker(spec.project, mode=spec.mode, entity=spec.entity)
    if spec.type == "mlflow":
        from corral.sdk.trackers.mlflow_sink import MlflowTracker

        return MlflowTracker(spec.tracking_uri, experiment=spec.project)
    if spec.type == "jsonl":
        from corral.sdk.trackers.jsonl import JsonlTracker

        return JsonlTracker(spec.path)
    return NullTracker()


def make_trackers(specs: Iterable[Any] | None, *, strict: bool = True) -> Tracker:
    """A :class:`CompositeTracker` of the trackers ``specs`` describe, or a
    :class:`NullTracker` when there are none. With ``strict=False`` a tracker that cannot be
    built is logged and left out instead of raising (a training run is worth more than its
    dashboard)."""
    built: list[Tracker] = []
    for raw in specs or ():
        try:
            built.append(build_tracker(raw))
        except Exception as e:
            kind = raw.get("type", "?") if isinstance(raw, dict) else getattr(raw, "type", "?")
            if strict:
                if isinstance(e, BadInput):
                    raise
                why = redact(f"{type(e).__name__}: {e}")
                raise BadInput(f"tracker '{kind}' could not start: {why}") from None
            log.warning("tracker '%s' left out: %s: %s", kind, type(e).__name__, redact(str(e)))
    if not built:
        return NullTracker()
    return CompositeTracker(built)
