"""Errors as the API answers them: ``{"code", "message"[, "fields"]}`` with a status chosen by
the error's class. Bad input is a 4xx, never a 5xx."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral.errors import (
    AgentError,
    BadInput,
    Conflict,
    CorralError,
    InfeasibleRequest,
    NotFound,
    ProviderError,
)
from corral.service.tokens import ReadOnlyToken, TokenRejected
from corral.storage.errors import StorageError

#: (error class, HTTP status), the first match wins: subclasses before their bases
STATUSES: tuple[tuple[type[CorralError], int], ...] = (
    (TokenRejected, 401),
    (ReadOnlyToken, 403),
    (BadInput, 422),
    (InfeasibleRequest, 422),
    (NotFound, 404),
    (Conflict, 409),
    (AgentError, 502),
    (StorageError, 502),
    (ProviderError, 503),
)


def status_of(exc: CorralError) -> int:
    for cls, status in STATUSES:
        if isinstance(exc, cls):
            return status
    return 500


def _corral_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CorralError)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, TokenRejected) else None
    return JSONResponse(exc.to_dict(), status_code=status_of(exc), headers=headers)


def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """A request FastAPI could not parse (bad JSON, a missing field, a wrong type)."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"),
            "message": str(e.get("msg", "")),
        }
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"field": "", "message": "invalid request"}
    message = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    body = BadInput(message, fields={"errors": errors}).to_dict()
    return JSONResponse(body, status_code=422)


#: the code of an HTTP error Starlette raises itself (no route, wrong method)
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (no such path, a method the path does not take) in the same
    shape as every other error."""
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else "request refused"
    if exc.status_code == 404:
        message = f"no such endpoint: {request.method} {request.url.path}"
    return JSONResponse(
        {"code": code, "message": message}, status_code=exc.status_code, headers=exc.headers
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(CorralError, _corral_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
