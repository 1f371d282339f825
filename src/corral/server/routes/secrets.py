"""Secrets by name and date only: values never leave the secret store."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from corral.server.auth import reader
from corral.server.openapi import errors
from corral.service.secrets import list_secrets

router = APIRouter(prefix="/api/v1/secrets", tags=["secrets"])


@router.get("", dependencies=[Depends(reader)], responses=errors(401))
def secrets() -> Any:
    """Names and dates of the stored secrets."""
    return {"secrets": [s.to_json() for s in list_secrets()]}
