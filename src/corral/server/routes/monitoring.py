"""GPU monitoring: every GPU of this machine and of each running run's node, with a health
verdict (thresholds: ``CORRAL_GPU_THRESHOLDS``, ``corral server --gpu-threshold``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from corral.server import deps
from corral.server.auth import reader
from corral.server.openapi import errors
from corral.service.monitoring import gpu_report
from corral.service.session import Store

router = APIRouter(prefix="/api/v1/monitoring", tags=["monitoring"])


@router.get("/gpu", dependencies=[Depends(reader)], responses=errors(401, 500))
def gpus(store: Store = Depends(deps.store), thresholds: Any = Depends(deps.gpu_thresholds)) -> Any:
    """Per GPU its name, memory used and total, utilisation, temperature, process count and
    ECC errors, for this machine (``host``) and each running run's node (``nodes``, through
    its agent), each with a verdict (``healthy``, ``warnings``, ``issues``) and one over all
    (``health``)."""
    return gpu_report(store=store, thresholds=thresholds).to_json()
