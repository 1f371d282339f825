"""The application factory: ``create_app()`` builds the FastAPI app uvicorn serves."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from corral import __version__
from corral.server import errors
from corral.server.routes import health, logs, runs, secrets
from corral.service.session import Store, open_store

#: origins allowed to call the API from a browser, comma-separated (``corral server
#: --cors-origin`` sets it); CORS is off when it is unset or empty
ENV_CORS_ORIGINS = "CORRAL_SERVER_CORS_ORIGINS"


def cors_origins_from_env() -> list[str]:
    raw = os.environ.get(ENV_CORS_ORIGINS, "")
    return [o.strip() for o in raw.split(",") if o.strip()]


def create_app(store: Store | None = None, *, cors_origins: Sequence[str] | None = None) -> FastAPI:
    """The API over ``store`` (default: opened when the app starts and closed when it stops;
    a store given is left open). CORS is off unless ``cors_origins`` (default: those of
    ``CORRAL_SERVER_CORS_ORIGINS``) names origins (``*``: any). OpenAPI documentation at
    ``/docs``. ``uvicorn corral.server.app:create_app --factory`` serves it as is."""
    if cors_origins is None:
        cors_origins = cors_origins_from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = store if store is not None else open_store()
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
    errors.install(app)
    for module in (health, runs, logs, secrets):
        app.include_router(module.router)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    return app
