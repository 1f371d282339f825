"""``GET /healthz``: the server answers (no token needed)."""

from __future__ import annotations

from fastapi import APIRouter

from corral import __version__

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """``{"status": "ok", "version": ...}`` while the server runs."""
    return {"status": "ok", "version": __version__}
