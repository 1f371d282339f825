"""``corral server``: serve the HTTP API (FastAPI on uvicorn) over this CORRAL_HOME's store.

The CLI and the server are two front doors side by side (neither imports the other): uvicorn
loads the app by its factory's name, ``corral.server.app:create_app``."""

from __future__ import annotations

import os

import typer

#: what uvicorn serves (the factory ``create_app`` of :mod:`corral.server.app`)
APP_FACTORY = "corral.server.app:create_app"
#: read by the factory: the origins --cors-origin allows (keep in step with corral.server.app)
ENV_CORS_ORIGINS = "CORRAL_SERVER_CORS_ORIGINS"


def server(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port to listen on."),
    cors_origin: list[str] = typer.Option(
        None,
        "--cors-origin",
        help="Allow browser calls from this origin (repeatable); CORS is off unless given.",
    ),
    gpu_threshold: list[str] = typer.Option(
        None,
        "--gpu-threshold",
        help="A GPU health threshold KEY=VALUE (repeatable), e.g. temperature_warn_c=80; "
        "see docs/server.md. Adds to CORRAL_GPU_THRESHOLDS.",
    ),
) -> None:
    """Serve the HTTP API (docs at /docs), the dashboard (/), GPU monitoring and Prometheus
    /metrics; every endpoint but /healthz needs a token from `corral token create`. A
    background controller is started if none runs."""
    from corral.cli.output import err_console
    from corral.errors import BadInput
    from corral.service.controller import ensure_controller
    from corral.service.gpu_health import ENV_GPU_THRESHOLDS, parse_thresholds

    try:
        import fastapi  # noqa: F401
        import sse_starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise BadInput(
            f"corral server needs the server extra ({exc.name} is missing): "
            "pip install 'corral[server]'"
        ) from None
    if cors_origin:
        os.environ[ENV_CORS_ORIGINS] = ",".join(cors_origin)
    else:
        os.environ.pop(ENV_CORS_ORIGINS, None)
    if gpu_threshold:
        pairs = [p for p in os.environ.get(ENV_GPU_THRESHOLDS, "").split(",") if p.strip()]
        value = ",".join([*pairs, *gpu_threshold])
        parse_thresholds(value, where="--gpu-threshold")  # a bad one: one line, before serving
        os.environ[ENV_GPU_THRESHOLDS] = value
    pid = ensure_controller(wait_s=5.0, notify=lambda line: err_console.print(line))
    err_console.print(
        f"controller running (pid {pid}); dashboard at http://{host}:{port}/, "
        f"API docs at http://{host}:{port}/docs"
    )
    uvicorn.run(APP_FACTORY, factory=True, host=host, port=port)
