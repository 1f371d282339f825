"""The application factory: ``create_app()`` builds the FastAPI app uvicorn serves."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from corral import __version__
from corral.server import errors, ui
from corral.server.routes import (
    artifacts,
    budget,
    bundles,
    dashboard,
    health,
    logs,
    metrics,
    monitoring,
    runs,
    secrets,
    sweeps,
)
from corral.service.gpu_health import GpuThresholds, thresholds_from_env
from corral.service.log_hub import LogHub
from corral.service.metrics import QueueProviders
from corral.service.session import Store, open_store

#: origins allowed to call the API from a browser, comma-separated (``corral server
#: --cors-origin`` sets it); CORS is off when it is unset or empty
ENV_CORS_ORIGINS = "CORRAL_SERVER_CORS_ORIGINS"


def cors_origins_from_env() -> list[str]:
    raw = os.environ.get(ENV_CORS_ORIGINS, "")
    return [o.strip() for o in raw.split(",") if o.strip()]


def create_app(
    store: Store | None = None,
    *,
    cors_origins: Sequence[str] | None = None,
    gpu_thresholds: GpuThresholds | None = None,
) -> FastAPI:
    """The API over ``store`` (default: opened when the app starts and closed when it stops;
    a store given is left open). CORS is off unless ``cors_origins`` (default: those of
    ``CORRAL_SERVER_CORS_ORIGINS``) names origins (``*``: any). GPU health verdicts use
    ``gpu_thresholds`` (default: ``CORRAL_GPU_THRESHOLDS``'s; a malformed value fails here,
    naming the key). OpenAPI documentation at ``/docs``.
    ``uvicorn corral.server.app:create_app --factory`` serves it as is."""
    if cors_origins is None:
        cors_origins = cors_origins_from_env()
    thresholds = gpu_thresholds if gpu_thresholds is not None else thresholds_from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = store if store is not None else open_store()
        app.state.log_hub = LogHub(app.state.store)
        try:
            yield
        finally:
            if store is None:
                app.state.store.close()

    app = FastAPI(
        title="corral",
        version=__version__,
        description="Launch GPU training runs and babysit them: the HTTP API of `corral server`.",
        lifespan=lifespan,
    )
    app.state.gpu_thresholds = thresholds
    app.state.queue_providers = QueueProviders()
    errors.install(app)
    routers = [
        m.router
        for m in (
            health,
            runs,
            bundles,
            logs,
            artifacts,
            secrets,
            budget,
            sweeps,
            monitoring,
            metrics,
            dashboard,
        )
    ]
    routers.append(sweeps.pages)
    for router in routers:
        app.include_router(router)
    errors.index_methods(
        app, [*app.router.routes, *(r for router in routers for r in router.routes)]
    )
    app.mount("/static", StaticFiles(directory=ui.STATIC), name="static")
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    return app
