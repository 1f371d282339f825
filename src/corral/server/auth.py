"""Bearer tokens (``corral token create``): ``reader`` for endpoints that read, ``writer``
for those that change state (a read-only token gets 403 there)."""

from __future__ import annotations

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral.service.tokens import TokenView, authenticate

_bearer = HTTPBearer(auto_error=False, description="an API token from `corral token create`")


def _token(creds: HTTPAuthorizationCredentials | None) -> str | None:
    return creds.credentials if creds is not None else None


def reader(creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> TokenView:
    """Any valid token (401 otherwise)."""
    return authenticate(_token(creds))


def writer(creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> TokenView:
    """A valid token that is not read-only (401, 403 otherwise)."""
    return authenticate(_token(creds), write=True)
