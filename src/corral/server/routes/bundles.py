"""Code bundles a remote CLI sends (``corral launch`` with ``CORRAL_SERVER``), named by their
sha256: ``HEAD`` says whether the server holds one, ``PUT`` uploads one (verified by its
sha256). Both need a write token: they come before a submit."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response

from corral.server.auth import writer
from corral.service import bundles

router = APIRouter(prefix="/api/v1/bundles", tags=["bundles"])

#: the header of a ``HEAD`` answer that holds the bundle's size
SIZE_HEADER = "X-Corral-Bundle-Size"


@router.head("/{sha256}", dependencies=[Depends(writer)])
def has_bundle(sha256: str) -> Response:
    """200 with the size in ``X-Corral-Bundle-Size`` when the server holds the bundle, else
    404: the CLI uploads it then."""
    size = bundles.bundle_size(sha256)
    if size is None:
        return Response(status_code=404)
    return Response(status_code=200, headers={SIZE_HEADER: str(size)})


@router.put("/{sha256}", dependencies=[Depends(writer)])
async def put_bundle(
    sha256: str,
    request: Request,
    size: int = Query(..., ge=0, description="the bundle's bytes"),
) -> Any:
    """Receive the bundle (the body: its bytes) and keep it once its size and sha256 are
    right; 422 with one line otherwise (nothing is kept)."""
    upload = bundles.Upload(sha256, size)
    try:
        async for data in request.stream():
            upload.feed(data)
        return upload.finish()
    finally:
        upload.close()
