"""What every request uses: the store the app was created with, held for its life, and the
GPU health thresholds it was started with."""

from __future__ import annotations

from fastapi import Request

from corral.service.gpu_health import GpuThresholds
from corral.service.log_hub import LogHub
from corral.service.session import Store


def store(request: Request) -> Store:
    held: Store = request.app.state.store
    return held


def gpu_thresholds(request: Request) -> GpuThresholds:
    held: GpuThresholds = request.app.state.gpu_thresholds
    return held


def log_hub(request: Request) -> LogHub:
    held: LogHub = request.app.state.log_hub
    return held
