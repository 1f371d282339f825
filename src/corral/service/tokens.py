"""API tokens for the HTTP server (``corral token create|list|revoke``).

A token is shown once, when it is created; only its SHA-256 digest is kept, in
``CORRAL_HOME/api-tokens.json`` (mode 0600, rewritten atomically under ``api-tokens.lock``),
with its name, kind (read-only or not) and creation date. A token is 32 random bytes
(``secrets.token_urlsafe``), so a plain digest is enough: there is nothing to guess.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral import paths
from corral.errors import BadInput, Conflict, CorralError, NotFound, StoreError
from corral.files import write_atomic
from corral.fslock import exclusive
from corral.service.views import IsoDatetime, View

TOKENS_FILE = "api-tokens.json"
LOCK_FILE = "api-tokens.lock"
#: every token starts with this, so a leaked one is recognisable (secret scanners)
PREFIX = "corral_"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_FORMAT = 1


class TokenRejected(CorralError):
    """No token, or one that is not (or no longer) valid. The message never echoes it."""

    code = "unauthorized"


class ReadOnlyToken(CorralError):
    """A read-only token was used for something that changes state."""

    code = "forbidden"


class TokenView(View):
    """What may be shown about a token: never the token nor its digest."""

    name: str
    read_only: bool
    created_at: IsoDatetime


class TokenCreated(View):
    """A new token: ``token`` is shown this once and stored nowhere."""

    name: str
    read_only: bool
    created_at: IsoDatetime
    token: str


class TokenRevoked(View):
    name: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise BadInput(
            f"token name {name!r}: use lower-case letters, digits, '.', '_' and '-' "
            "(at most 64, starting with a letter or digit)"
        )
    return name


class TokenFile:
    """The token records of one ``CORRAL_HOME`` (default: the current one)."""

    def __init__(self, home: Path | None = None):
        self.home = home or paths.home()
        self.path = self.home / TOKENS_FILE
        self.lock = self.home / LOCK_FILE

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            tokens = doc["tokens"]
            assert isinstance(tokens, list)
            return tokens
        except (OSError, ValueError, KeyError, AssertionError, TypeError):
            raise StoreError(f"{self.path} is unreadable: fix or remove it") from None

    def _write(self, tokens: list[dict[str, Any]]) -> None:
        doc = {"format": _FORMAT, "tokens": tokens}
        write_atomic(self.path, json.dumps(doc, indent=1), mode=0o600)

    def create(self, name: str, *, read_only: bool = False) -> TokenCreated:
        _check_name(name)
        token = PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        with exclusive(self.lock):
            tokens = self._read()
            if any(t["name"] == name for t in tokens):
                raise Conflict(f"a token named {name} exists: revoke it first")
            tokens.append(
                {
                    "name": name,
                    "sha256": _digest(token),
                    "read_only": read_only,
                    "created_at": now.isoformat(),
                }
            )
            self._write(tokens)
        return TokenCreated(name=name, read_only=read_only, created_at=now, token=token)

    def list(self) -> list[TokenView]:
        return [_view(t) for t in sorted(self._read(), key=lambda t: t["name"])]

    def revoke(self, name: str) -> TokenRevoked:
        with exclusive(self.lock):
            tokens = self._read()
            kept = [t for t in tokens if t["name"] != name]
            if len(kept) == len(tokens):
                raise NotFound(f"no API token named {name}")
            self._write(kept)
        return TokenRevoked(name=name)

    def check(self, token: str | None) -> TokenView:
        """The token's record; TokenRejected when it is missing or unknown."""
        if not token:
            raise TokenRejected("an API token is needed: Authorization: Bearer <token>")
        digest = _digest(token)
        found = None
        for record in self._read():  # compare every one in constant time
            if hmac.compare_digest(str(record.get("sha256", "")), digest):
                found = record
        if found is None:
            raise TokenRejected("the API token is not valid (revoked, or never created)")
        return _view(found)


def _view(record: dict[str, Any]) -> TokenView:
    return TokenView(
        name=record["name"],
        read_only=bool(record.get("read_only")),
        created_at=datetime.fromisoformat(record["created_at"]),
    )


def create_token(name: str, *, read_only: bool = False) -> TokenCreated:
    """A new API token named ``name`` (Conflict when one by that name exists); its value is
    in the result only. ``read_only``: it may read, never submit, stop or cancel."""
    return TokenFile().create(name, read_only=read_only)


def list_tokens() -> list[TokenView]:
    """Names, kinds and dates of the API tokens, by name."""
    return TokenFile().list()


def revoke_token(name: str) -> TokenRevoked:
    """Forget token ``name`` (NotFound when there is none): it is refused from now on."""
    return TokenFile().revoke(name)


def authenticate(token: str | None, *, write: bool = False) -> TokenView:
    """The token's record if it may be used: TokenRejected when it is missing or unknown,
    ReadOnlyToken when ``write`` is asked of a read-only one."""
    view = TokenFile().check(token)
    if write and view.read_only:
        raise ReadOnlyToken(f"token {view.name} is read-only: it cannot change anything")
    return view
