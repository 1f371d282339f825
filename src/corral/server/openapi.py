"""What the OpenAPI document says a route answers besides its success: the error body every
error has (:class:`ErrorBody`, as :mod:`corral.server.errors` writes it) under each status a
route can return, so a client generated from ``/openapi.json`` knows every answer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.service.bundles import SHA256_PATTERN


class ErrorBody(BaseModel):
    """Every error the API answers: a machine code, one line for a person, and for bad
    input the fields at fault (``fields.errors``: ``[{field, message}]``)."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="machine-readable: not_found, bad_input, conflict, ...")
    message: str = Field(description="one line naming the field or value at fault")
    fields: dict[str, Any] | None = Field(default=None, description="details, e.g. errors")


#: what each error status means, the same for every route
_MEANING = {
    401: "no token, or one that is not valid (or was revoked)",
    403: "a read-only token where a write token is needed",
    404: "no such run (or no such stage, attempt, file)",
    409: "the request conflicts with the run's state (it already ended), or an artifact "
    "in storage differs from its manifest",
    422: "a request the API cannot take: a parameter or body that is invalid, named in "
    "`message` and `fields.errors`",
    500: "the store or the controller failed (not the request: try again)",
    502: "the node's agent or the artifact storage failed to answer",
    503: "a cloud provider failed to answer",
}

#: the header of every 401 (RFC 6750)
_CHALLENGE = {
    "WWW-Authenticate": {
        "description": "the scheme to authenticate with",
        "required": True,
        "schema": {"type": "string", "enum": ["Bearer"]},
    }
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route that can answer these error statuses, each with
    :class:`ErrorBody` (and, for 401, its ``WWW-Authenticate`` header)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorBody, "description": _MEANING[status]}
        if status == 401:
            entry["headers"] = _CHALLENGE
        out[status] = entry
    return out


#: the errors of a route any token may call (401: no valid token; 422: bad parameters; 500:
#: the store failed)
READ = (401, 422, 500)
#: the errors of a route that needs a write token
WRITE = (401, 403, 422, 500)

#: what each pattern of the document means, for the 422 of a value that does not match it
_PATTERNS: dict[str, str] = {}


def pattern(regex: str, meaning: str) -> str:
    """``regex`` for a ``pattern=`` of the document; a value that does not match it is
    refused with ``meaning`` (not the regex) in the error's message."""
    _PATTERNS[regex] = meaning
    return regex


def meaning_of(regex: str) -> str | None:
    return _PATTERNS.get(regex)


#: a bundle's name: its sha256
SHA256 = pattern(SHA256_PATTERN, "a sha256 (64 lowercase hex digits)")
