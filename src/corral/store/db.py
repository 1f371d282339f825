"""Database URLs, the two dialects (SQLite, PostgreSQL) and short transactions over DB-API.

The store talks to the database through the standard library's ``sqlite3`` or ``psycopg``
directly: importing SQLAlchemy costs more than the whole 200 ms start-up budget of
``corral ls``, so SQLAlchemy and alembic are loaded only to migrate the schema (see
``docs/store.md``). Queries are written once with ``:name`` parameters and run on both.

Every operation is one short transaction on a pooled connection; no transaction outlives the
call that opened it. SQLite writes start with ``BEGIN IMMEDIATE`` so concurrent writers queue
on the busy timeout instead of failing half-way; PostgreSQL writes lock the rows they change.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from corral.errors import StoreError

BUSY_TIMEOUT_S = 10.0
_SQLITE_TS = "%Y-%m-%d %H:%M:%S.%f"  # the format SQLAlchemy's DateTime uses on SQLite
#: pg_advisory_xact_lock key taken before inserting an event (see ``PostgresDialect``).
_PG_EVENTS_LOCK = 0x636F7272616C01


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
    """``url`` with its password replaced by ``***`` (unparsable URLs are hidden entirely)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rsplit("@", 1)[1]
        user = quote(unquote(parts.username or ""), safe="")
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return "<unparsable database URL>"


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every spelling of ``secret`` (raw or URL-quoted) replaced by ``***``."""
    if secret:
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(form, "***")
    return text


def parse_url(url: str | None) -> DbUrl:
    """The database to use: ``url``, else ``CORRAL_DATABASE_URL``, else SQLite under home."""
    from corral.constants import ENV_DATABASE_URL

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
            password = urlsplit(raw).password
        except ValueError:
            raise StoreError(f"database URL {masked!r} is malformed")
        return DbUrl(
            "postgresql",
            url="postgresql+psycopg://" + rest,
            masked=mask_url("postgresql+psycopg://" + rest),
            conninfo="postgresql://" + rest,
            password=unquote(password) if password else None,
        )
    raise StoreError(f"database URL {masked!r}: only sqlite:/// and postgresql:// are supported")


class Dialect:
    """What differs between SQLite and PostgreSQL, behind one small interface."""

    name: str
    errors: tuple[type[BaseException], ...]
    for_update = ""

    def __init__(self, db_url: DbUrl):
        self.db_url = db_url

    def connect(self) -> Any: ...
    def cursor(self, conn: Any, tuples: bool) -> Any: ...
    def begin(self, conn: Any, write: bool) -> None: ...
    def commit(self, conn: Any) -> None:
        conn.commit()

    def rollback(self, conn: Any) -> None:
        conn.rollback()

    def broken(self, conn: Any) -> bool:
        return False

    def sql(self, text: str) -> str:
        return text

    def lock_events(self, cur: Any) -> None:
        """Called before inserting an event row (see ``PostgresDialect.lock_events``)."""

    def ts_in(self, value: datetime | None) -> Any:
        return value

    def ts_out(self, value: Any) -> datetime | None:
        return value

    def json_in(self, value: Any) -> str | None:
        if value is None:
            return None
        try:
            return json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"cannot store a value that is not plain JSON: {exc}") from None

    def json_out(self, value: Any) -> Any:
        return value  # PostgreSQL: psycopg parses json columns itself

    def describe(self, exc: BaseException) -> str:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return scrub(f"database error on {self.db_url.masked}: {first}", self.db_url.password)


def _dict_row(cursor: sqlite3.Cursor, row: tuple) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cursor.description, row, strict=True)}


class SqliteDialect(Dialect):
    name = "sqlite"
    errors = (sqlite3.Error,)

    def connect(self) -> sqlite3.Connection:
        path = self.db_url.path
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def cursor(self, conn: sqlite3.Connection, tuples: bool) -> sqlite3.Cursor:
        cur = conn.cursor()
        cur.row_factory = None if tuples else _dict_row
        return cur

    def begin(self, conn: sqlite3.Connection, write: bool) -> None:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def commit(self, conn: sqlite3.Connection) -> None:
        conn.execute("COMMIT")

    def rollback(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def ts_in(self, value: datetime | None) -> str | None:
        return None if value is None else _utc(value).strftime(_SQLITE_TS)

    def ts_out(self, value: Any) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value + "+00:00")

    def json_out(self, value: Any) -> Any:
        return None if value is None else json.loads(value)

    def describe(self, exc: BaseException) -> str:
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            return (
                f"database is busy: another process kept {self.db_url.path} locked "
                f"for more than {BUSY_TIMEOUT_S:g} s"
            )
        return super().describe(exc)


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3.

    Event ids come from a sequence, and sequence values are handed out at insert time, not at
    commit: two writers could commit ids 8 and 7 in that order and a reader polling with
    ``after_id=7`` would never see 7. Inserting an event therefore takes a transaction-scoped
    advisory lock, so events commit in id order (the writes are short; the lock is held for
    microseconds).
    """

    name = "postgresql"
    for_update = " FOR UPDATE"

    def __init__(self, db_url: DbUrl):
        super().__init__(db_url)
        try:
            import psycopg
        except ImportError:
            raise StoreError("PostgreSQL needs psycopg 3: pip install 'corral[postgres]'") from None

        self._psycopg = psycopg
        self.errors = (psycopg.Error,)

    def connect(self) -> Any:
        try:
            return self._psycopg.connect(
                self.db_url.conninfo or "",
                connect_timeout=int(BUSY_TIMEOUT_S),
                options=f"-c lock_timeout={int(BUSY_TIMEOUT_S * 1000)} -c timezone=UTC",
            )
        except self._psycopg.Error as exc:
            raise StoreError(self.describe(exc)) from None

    def cursor(self, conn: Any, tuples: bool) -> Any:
        from psycopg.rows import dict_row, tuple_row

        return conn.cursor(row_factory=tuple_row if tuples else dict_row)

    def begin(self, conn: Any, write: bool) -> None:
        pass  # psycopg opens a transaction at the first statement

    def broken(self, conn: Any) -> bool:
        return bool(conn.broken or conn.closed)

    def sql(self, text: str) -> str:
        return _pg_params(text)

    def lock_events(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%(k)s)", {"k": _PG_EVENTS_LOCK})

    def ts_in(self, value: datetime | None) -> datetime | None:
        return None if value is None else _utc(value)

    def ts_out(self, value: Any) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    def describe(self, exc: BaseException) -> str:
        if isinstance(exc, self._psycopg.OperationalError):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "connection failed"
            msg = f"cannot use the database {self.db_url.masked}: {first}"
            return scrub(msg, self.db_url.password)
        return super().describe(exc)


@lru_cache(maxsize=512)
def _pg_params(text: str) -> str:
    return re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", r"%(\1)s", text)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Tx:
    """One open transaction: run ``:name``-style SQL, get rows as dicts (or tuples)."""

    def __init__(self, conn: Any, dialect: Dialect):
        self.conn = conn
        self.dialect = dialect
        self.cur = dialect.cursor(conn, tuples=False)
        self._tuple_cur: Any = None

    def run(self, sql: str, params: dict[str, Any] | None = None) -> int:
        self.cur.execute(self.dialect.sql(sql), params or {})
        return self.cur.rowcount

    def all(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        self.cur.execute(self.dialect.sql(sql), params or {})
        return self.cur.fetchall()

    def one(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        self.cur.execute(self.dialect.sql(sql), params or {})
        return self.cur.fetchone()

    def tuples(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        """Rows as tuples: the cheap path for many rows."""
        if self._tuple_cur is None:
            self._tuple_cur = self.dialect.cursor(self.conn, tuples=True)
        self._tuple_cur.execute(self.dialect.sql(sql), params or {})
        return self._tuple_cur.fetchall()


class Database:
    """A dialect plus a small pool of idle connections (dropped after a fork)."""

    def __init__(self, db_url: DbUrl, max_idle: int = 4):
        self.url = db_url
        self.dialect: Dialect = (
            SqliteDialect(db_url) if db_url.dialect == "sqlite" else PostgresDialect(db_url)
        )
        self._idle: list[Any] = []
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False

    def _acquire(self) -> Any:
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            if self._pid != os.getpid():  # forked: the parent's connections are not ours
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        try:
            return self.dialect.connect()
        except self.dialect.errors as exc:
            raise StoreError(self.dialect.describe(exc)) from None

    def _release(self, conn: Any, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        _close_quietly(conn)

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Tx]:
        """A short transaction, committed on success and rolled back on any exception.

        Driver errors come out as :class:`~corral.errors.StoreError` with a one-line message
        that never contains the database password.
        """
        conn = self._acquire()
        dialect = self.dialect
        reusable = True
        try:
            dialect.begin(conn, write)
            yield Tx(conn, dialect)
            dialect.commit(conn)
        except BaseException as exc:
            try:
                dialect.rollback(conn)
            except dialect.errors:
                reusable = False
            reusable = reusable and not dialect.broken(conn)
            if isinstance(exc, dialect.errors):
                raise StoreError(dialect.describe(exc)) from None
            raise
        finally:
            self._release(conn, reusable)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            _close_quietly(conn)


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        pass
