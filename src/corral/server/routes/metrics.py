"""``GET /metrics``: Prometheus metrics (runs, cost, webhooks, the controller's loop, GPUs,
queues). Needs a token like the API (Prometheus: ``authorization: {credentials: ...}``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from corral.server import deps
from corral.server.auth import reader
from corral.server.openapi import errors
from corral.server.prometheus import exposition
from corral.service.gpu_health import GpuThresholds
from corral.service.metrics import snapshot
from corral.service.session import Store

router = APIRouter(tags=["monitoring"])


@router.get(
    "/metrics",
    dependencies=[Depends(reader)],
    response_class=Response,
    responses={
        200: {
            "description": "the Prometheus text exposition format",
            "content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
        },
        **errors(401, 500),
    },
)
def metrics(
    request: Request,
    store: Store = Depends(deps.store),
    thresholds: GpuThresholds = Depends(deps.gpu_thresholds),
) -> Response:
    """Prometheus text format; see docs/server.md for every metric."""
    snap = snapshot(
        store=store, thresholds=thresholds, queue_providers=request.app.state.queue_providers
    )
    return Response(exposition(snap), media_type=CONTENT_TYPE_LATEST)
