"""GPU monitoring: every GPU of this machine and of each running run's node, with a health
verdict (thresholds: ``CORRAL_GPU_THRESHOLDS``, ``corral server --gpu-threshold``); and what
the controller recorded of them over time."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from corral.errors import BadInput
from corral.server import deps
from corral.server.auth import reader
from corral.server.openapi import READ, errors, pattern
from corral.service import gpu_history as history
from corral.service.monitoring import gpu_report
from corral.service.session import Store

router = APIRouter(prefix="/api/v1/monitoring", tags=["monitoring"])
#: a moment of the history's window
WHEN = pattern(history.WHEN_PATTERN, history.WHEN_MEANING)


@router.get("/gpu", dependencies=[Depends(reader)], responses=errors(401, 500))
def gpus(store: Store = Depends(deps.store), thresholds: Any = Depends(deps.gpu_thresholds)) -> Any:
    """Per GPU its name, memory used and total, utilisation, temperature, process count and
    ECC errors, for this machine (``host``) and each running run's node (``nodes``, through
    its agent), each with a verdict (``healthy``, ``warnings``, ``issues``) and one over all
    (``health``)."""
    return gpu_report(store=store, thresholds=thresholds).to_json()


def _each_once(request: Request) -> None:
    """The history's parameters take one value each: one given twice is refused, not the
    last taken."""
    for name in ("since", "until", "gpu", "machine", "points"):
        if len(request.query_params.getlist(name)) > 1:
            raise BadInput(f"{name} is given more than once: give one value")


@router.get(
    "/gpu/history",
    dependencies=[Depends(reader), Depends(_each_once)],
    responses={200: {"model": history.GpuHistory}, **errors(*READ)},
)
def gpu_history(
    since: str = Query(
        history.DEFAULT_SINCE,
        pattern=WHEN,
        description="from when: a duration before now (90s, 30m, 6h, 7d, 2w) or @unix seconds",
    ),
    until: str | None = Query(
        None, pattern=WHEN, description="until when (the same forms; default now)"
    ),
    gpu: str | None = Query(
        None, min_length=1, max_length=128, description="only the GPUs of this index or uuid"
    ),
    machine: str | None = Query(
        None,
        min_length=1,
        max_length=256,
        description="only the GPUs of this host, or of this run's node (its id or name)",
    ),
    points: int = Query(
        history.DEFAULT_POINTS,
        ge=history.MIN_POINTS,
        le=history.MAX_POINTS,
        description="the most points per GPU: a longer window's readings are averaged over "
        "equal spans",
    ),
    store: Store = Depends(deps.store),
) -> Any:
    """What the controller recorded of every GPU (this machine's, each run's node's: one
    reading a minute per GPU by default, kept 7 days): per GPU its place and
    ``utilization_pct``, ``memory_used_mb`` and ``temperature_c`` as ``[unix seconds,
    value]`` points, oldest first, at most ``points`` of each."""
    return history.gpu_history(
        since=since, until=until, gpu=gpu, machine=machine, points=points, store=store
    ).to_json()
