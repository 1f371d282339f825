"""Database URLs: which database to use, and how to show its URL without the password."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from corral.errors import StoreError


@dataclass(frozen=True)
class DbUrl:
    """A parsed database URL. ``url`` may hold a password: show ``masked`` instead."""

    dialect: str  # "sqlite" | "postgresql"
    url: str  # SQLAlchemy form, for alembic
    masked: str
    path: Path | None = None  # SQLite file
    conninfo: str | None = None  # libpq URL, for psycopg
    password: str | None = None


def mask_url(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` query parameter)
    replaced by ``***``; an unparsable URL is hidden entirely."""
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            host = parts.netloc.rsplit("@", 1)[1]
            user = quote(unquote(parts.username or ""), safe="")
            parts = parts._replace(netloc=f"{user}:***@{host}")
        if _query_password(parts.query) is not None:
            query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", parts.query)
            parts = parts._replace(query=query)
        return urlunsplit(parts)
    except ValueError:
        return "<unparsable database URL>"


def _query_password(query: str) -> str | None:
    found = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == "password"]
    return found[-1] if found else None


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every spelling of ``secret`` (raw or URL-quoted) replaced by ``***``."""
    if secret:
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(form, "***")
    return text


def parse_url(url: str | None) -> DbUrl:
    """The database to use: ``url``, else ``CORRAL_DATABASE_URL``, else SQLite under home."""
    from corral.wire.env import ENV_DATABASE_URL

    raw = url or os.environ.get(ENV_DATABASE_URL) or ""
    if not raw:
        from corral.paths import home

        path = home() / "corral.db"
        return DbUrl("sqlite", f"sqlite:///{path}", f"sqlite:///{path}", path=path)
    masked = mask_url(raw)
    scheme, sep, rest = raw.partition("://")
    if not sep:
        raise StoreError(f"database URL {masked!r} has no scheme (sqlite:/// or postgresql://)")
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not rest.startswith("/") or rest in ("/", "/:memory:") or "?" in rest:
            raise StoreError(f"database URL {masked!r}: use sqlite:///<path to a file>")
        path = Path(rest[1:]).expanduser().resolve()
        return DbUrl("sqlite", f"sqlite:///{path}", f"sqlite:///{path}", path=path)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        try:
            parts = urlsplit(raw)
            password = _query_password(parts.query) or unquote(parts.password or "")
        except ValueError:
            raise StoreError(f"database URL {masked!r} is malformed")
        return DbUrl(
            "postgresql",
            url="postgresql+psycopg://" + rest,
            masked=mask_url("postgresql+psycopg://" + rest),
            conninfo="postgresql://" + rest,
            password=password or None,
        )
    raise StoreError(f"database URL {masked!r}: only sqlite:/// and postgresql:// are supported")
