"""A run's results from artifact storage: the manifest, one listed file, the whole archive."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from corral.server import deps
from corral.server.auth import reader
from corral.server.openapi import READ, errors
from corral.service import artifacts as service
from corral.service.session import Store

router = APIRouter(prefix="/api/v1/runs/{ref}", tags=["artifacts"])
log = logging.getLogger("corral.server")

#: the headers of a download
_DOWNLOAD_HEADERS = {
    "Content-Disposition": {
        "description": "attachment, with the file's name",
        "required": True,
        "schema": {"type": "string"},
    },
    "X-Corral-Sha256": {
        "description": "the file's sha256 as the manifest lists it (absent for the archive)",
        "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
}


def _download(media_type: str, what: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route that streams a download of ``media_type``."""
    return {
        200: {
            "description": what,
            "headers": _DOWNLOAD_HEADERS,
            "content": {media_type: {"schema": {"type": "string", "format": "binary"}}},
        },
        **errors(*READ, 404, 409, 502),
    }


def _send(download: service.Download) -> StreamingResponse:
    """Stream the download (a sync iterator: Starlette reads it in a worker thread)."""
    headers = {"Content-Disposition": f'attachment; filename="{download.filename}"'}
    if download.size is not None:
        headers["Content-Length"] = str(download.size)
    if download.sha256 is not None:
        headers["X-Corral-Sha256"] = download.sha256
    return StreamingResponse(download.chunks, media_type=download.media_type, headers=headers)


@router.get("/artifacts", dependencies=[Depends(reader)], responses=errors(*READ, 404, 502))
def manifest(ref: str, store: Store = Depends(deps.store)) -> Any:
    """The manifest the run's last attempt wrote to artifact storage, and its files (path,
    size, sha256). 404 when the run has no ``artifacts.storage`` or no manifest there yet."""
    return service.artifacts(ref, store=store).to_json()


@router.get(
    "/artifacts/{path:path}",
    dependencies=[Depends(reader)],
    response_class=StreamingResponse,
    responses=_download("*/*", "the file's bytes"),
)
def artifact(ref: str, path: str, store: Store = Depends(deps.store)) -> StreamingResponse:
    """One file the manifest lists, by its workdir-relative path; its sha256 in the
    ``X-Corral-Sha256`` header. 404 for a path the manifest does not list."""
    return _send(service.artifact_file(ref, path, store=store))


@router.get(
    "/results.tar.gz",
    dependencies=[Depends(reader)],
    response_class=StreamingResponse,
    responses=_download("application/gzip", "the archive, built while it streams"),
)
def results(ref: str, store: Store = Depends(deps.store)) -> StreamingResponse:
    """The whole results archive (``manifest.json`` and ``artifacts/<path>``, the layout of
    the agent's ``results.tar.gz``), built from storage while it streams."""

    def failed(exc: BaseException) -> None:
        log.warning("run %s: the results archive broke off: %s", ref, exc)

    return _send(service.results_archive(ref, store=store, on_error=failed))
