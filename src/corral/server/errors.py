"""Errors as the API answers them: ``{"code", "message"[, "fields"]}`` with a status chosen by
the error's class. Bad input is a 4xx, never a 5xx."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, compile_path

from corral.errors import (
    AgentError,
    BadInput,
    Conflict,
    CorralError,
    InfeasibleRequest,
    NotFound,
    ProviderError,
)
from corral.server.openapi import meaning_of
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


def _message(error: Any) -> str:
    """Pydantic's message, but for a pattern the document describes: the value and what
    was expected, not the regex."""
    meaning = meaning_of(str((error.get("ctx") or {}).get("pattern", "")))
    if error.get("type") == "string_pattern_mismatch" and meaning is not None:
        return f"{str(error.get('input'))[:80]!r}: expected {meaning}"
    return str(error.get("msg", ""))


def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """A request FastAPI could not parse (bad JSON, a missing field, a wrong type)."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"),
            "message": _message(e),
        }
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"field": "", "message": "invalid request"}
    message = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    body = BadInput(message, fields={"errors": errors}).to_dict()
    return JSONResponse(body, status_code=422)


#: the code of an HTTP error Starlette raises itself (no route, wrong method)
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def index_methods(app: FastAPI, routes: Iterable[BaseRoute]) -> None:
    """Remember every method of every path of ``routes``, for a 405's ``Allow``: Starlette's
    own names only those of the first route that matched the path (``HEAD`` and ``PUT`` of
    one path are two routes)."""
    table: dict[str, set[str]] = {}
    for route in routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if isinstance(path, str) and methods:
            table.setdefault(path, set()).update(methods)
    app.state.path_methods = [(compile_path(p)[0], m) for p, m in table.items()]


def _allowed(request: Request) -> str:
    methods: set[str] = set()
    for pattern, taken in getattr(request.app.state, "path_methods", []):
        if pattern.match(request.scope["path"]):
            methods |= taken
    return ", ".join(sorted(methods))


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (no such path, a method the path does not take) in the same
    shape as every other error; a 405's ``Allow`` names every method of the path."""
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else "request refused"
    headers = dict(exc.headers or {})
    if exc.status_code == 400:  # FastAPI's own: a body it could not read as JSON text
        body = BadInput(f"body: {message} (expected JSON, UTF-8)").to_dict()
        return JSONResponse(body, status_code=422)
    if exc.status_code == 404:
        message = f"no such endpoint: {request.method} {request.url.path}"
    if exc.status_code == 405:
        headers["Allow"] = _allowed(request)
        message = f"{request.method} {request.url.path}: the path takes {headers['Allow']}"
    return JSONResponse(
        {"code": code, "message": message}, status_code=exc.status_code, headers=headers
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(CorralError, _corral_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
