"""Code bundles a remote CLI sends (``corral launch`` with ``CORRAL_SERVER``), named by their
sha256: ``HEAD`` says whether the server holds one, ``PUT`` uploads one (verified by its
sha256). Both need a write token: they come before a submit."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from corral.errors import NotFound
from corral.server.auth import writer
from corral.server.openapi import SHA256 as SHA256_PATTERN
from corral.server.openapi import WRITE, errors
from corral.service import bundles

router = APIRouter(prefix="/api/v1/bundles", tags=["bundles"])

#: the header of a ``HEAD`` answer that holds the bundle's size
SIZE_HEADER = "X-Corral-Bundle-Size"
#: a bundle's name in the path: its sha256
SHA256 = Path(pattern=SHA256_PATTERN, description="the bundle's sha256 (lowercase hex)")
#: a ``HEAD`` that finds the bundle: no body, its size in a header
_HELD: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the server holds the bundle",
        "headers": {
            SIZE_HEADER: {
                "description": "the bundle's bytes",
                "required": True,
                "schema": {"type": "integer", "minimum": 0},
            }
        },
    }
}


@router.head(
    "/{sha256}",
    dependencies=[Depends(writer)],
    response_class=Response,
    responses={**_HELD, **errors(*WRITE, 404)},
)
def has_bundle(sha256: str = SHA256) -> Response:
    """200 with the size in ``X-Corral-Bundle-Size`` when the server holds the bundle, else
    404: the CLI uploads it then."""
    size = bundles.bundle_size(sha256)
    if size is None:
        raise NotFound(f"no bundle {sha256} on the server")
    return Response(status_code=200, headers={SIZE_HEADER: str(size)})


#: the upload's body as the document shows it: the bundle's bytes
_BYTES = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.put(
    "/{sha256}", dependencies=[Depends(writer)], responses=errors(*WRITE), openapi_extra=_BYTES
)
async def put_bundle(
    request: Request,
    sha256: str = SHA256,
    size: int = Query(..., ge=0, le=bundles.MAX_UPLOAD, description="the bundle's bytes"),
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
