"""Secrets by name and date only: values never leave the secret store."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from corral.server.auth import reader
from corral.server.openapi import errors
from corral.service.secrets import list_secrets
from corral.service.views import SecretView

router = APIRouter(prefix="/api/v1/secrets", tags=["secrets"])


class Secrets(BaseModel):
    """The stored secrets, by name and dates."""

    model_config = ConfigDict(extra="forbid")

    secrets: list[SecretView]


@router.get(
    "",
    dependencies=[Depends(reader)],
    responses={200: {"model": Secrets}, **errors(401, 500)},
)
def secrets() -> Any:
    """Names and dates of the stored secrets."""
    return {"secrets": [s.to_json() for s in list_secrets()]}
