"""Who may call: a bearer token (``corral token create``), or the dashboard's cookie.

``reader`` guards endpoints that read, ``writer`` those that change state (a read-only token
gets 403 there). The dashboard's login stores the token in an HttpOnly, SameSite=Strict
cookie (:data:`COOKIE`); a write made with that cookie must also carry the
:data:`DASHBOARD_HEADER` header, which a page of another site cannot send without CORS (off
unless configured), so another site cannot make a logged-in browser stop a run.
"""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral.service.tokens import TokenRejected, TokenView, authenticate

#: the cookie the dashboard's login sets (the token itself; HttpOnly, SameSite=Strict)
COOKIE = "corral_token"
#: the header a write made with the cookie must carry (the dashboard's script sends it)
DASHBOARD_HEADER = "X-Corral-Dashboard"

_bearer = HTTPBearer(auto_error=False, description="an API token from `corral token create`")


def _token(creds: HTTPAuthorizationCredentials | None, request: Request) -> str | None:
    if creds is not None:
        return creds.credentials
    return request.cookies.get(COOKIE) or None


def reader(
    request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> TokenView:
    """Any valid token, from the header or the dashboard's cookie (401 otherwise)."""
    return authenticate(_token(creds, request))


def writer(
    request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> TokenView:
    """A valid token that is not read-only (401, 403 otherwise); with the cookie, only a
    request that carries :data:`DASHBOARD_HEADER`."""
    by_cookie = creds is None and bool(request.cookies.get(COOKIE))
    if by_cookie and request.headers.get(DASHBOARD_HEADER) != "1":
        raise TokenRejected(f"a write with the dashboard's cookie needs {DASHBOARD_HEADER}: 1")
    return authenticate(_token(creds, request), write=True)


def viewer(request: Request) -> TokenView | None:
    """The dashboard's visitor: the token of its cookie, or None (not logged in, revoked)."""
    try:
        return authenticate(request.cookies.get(COOKIE) or None)
    except TokenRejected:
        return None
