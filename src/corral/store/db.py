"""The two dialects (SQLite, PostgreSQL) and short transactions over DB-API.

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
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from corral.errors import StoreError
from corral.store.urls import DbUrl, scrub

BUSY_TIMEOUT_S = 10.0
_SQLITE_TS = "%Y-%m-%d %H:%M:%S.%f"  # the format SQLAlchemy's DateTime uses on SQLite
#: pg_advisory_xact_lock key taken before inserting an event (see ``PostgresDialect``).
_PG_EVENTS_LOCK = 0x636F7272616C01


class Dialect(ABC):
    """What differs between SQLite and PostgreSQL, behind one small interface."""

    name: str
    errors: tuple[type[BaseException], ...]
    for_update = ""
    #: after a subquery's rows that an UPDATE takes: rows another transaction is taking are
    #: passed over, not waited for (two controllers taking free runs at once take different ones)
    skip_locked = ""
    #: SQL for a run's spec ``priority`` (5 when it has none)
    run_priority = "5"
    #: after ``FROM runs`` in a listing of the unfinished runs, newest first
    active_runs_hint = ""
    #: after ``FROM runs`` in a read of the unfinished runs by their lease holder
    lease_runs_hint = ""

    def __init__(self, db_url: DbUrl):
        self.db_url = db_url

    @abstractmethod
    def connect(self) -> Any:
        """A new DB-API connection, configured, outside any transaction."""

    @abstractmethod
    def cursor(self, conn: Any, tuples: bool) -> Any:
        """A cursor whose rows are tuples or dicts keyed by column name."""

    @abstractmethod
    def begin(self, conn: Any, write: bool) -> None:
        """Start a transaction; ``write``: one that will write (take the lock up front)."""

    #: the database takes one write transaction at a time (``Database`` queues its threads)
    one_writer = False

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
        return None  # SQLite: writers are serialised already, ids commit in order

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
        return f"database error on {self.db_url.masked}: {self._first_line(exc)}"

    def _first_line(self, exc: BaseException) -> str:
        """The driver's message, first line only, with any spelling of the password hidden."""
        lines = str(exc).strip().splitlines()
        return scrub(lines[0] if lines else type(exc).__name__, self.db_url.password)


def _dict_row(cursor: sqlite3.Cursor, row: tuple) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cursor.description, row, strict=True)}


class SqliteDialect(Dialect):
    name = "sqlite"
    #: one writer at a time: this process's threads queue on a lock of their own for it
    #: (SQLite's busy handler would make them sleep 1, 2, 5, ... 100 ms between tries)
    one_writer = True
    #: without statistics SQLite would read the state index and sort every unfinished run
    active_runs_hint = " INDEXED BY ix_runs_active"
    lease_runs_hint = " INDEXED BY ix_runs_leases"
    #: the run's spec ``priority`` (5 when it has none), for ordering in SQL
    run_priority = "COALESCE(json_extract(spec, '$.priority'), 5)"
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
    skip_locked = " FOR UPDATE SKIP LOCKED"
    run_priority = "COALESCE((spec->>'priority')::int, 5)"

    def __init__(self, db_url: DbUrl):
        super().__init__(db_url)
        try:
            import psycopg
        except ImportError:
            raise StoreError("PostgreSQL needs psycopg 3: pip install 'corral[postgres]'") from None

        from psycopg.conninfo import conninfo_to_dict

        self._psycopg = psycopg
        self.errors = (psycopg.Error,)
        try:
            given = conninfo_to_dict(db_url.conninfo or "")
        except psycopg.Error as exc:
            raise StoreError(self.describe(exc)) from None
        ours = f"-c lock_timeout={int(BUSY_TIMEOUT_S * 1000)} -c timezone=UTC"
        self._options = f"{given.get('options') or ''} {ours}".strip()
        self._connect_timeout = given.get("connect_timeout") or int(BUSY_TIMEOUT_S)

    def connect(self) -> Any:
        try:
            return self._psycopg.connect(
                self.db_url.conninfo or "",
                connect_timeout=self._connect_timeout,
                options=self._options,
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
            return f"cannot use the database {self.db_url.masked}: {self._first_line(exc)}"
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
        #: held through each write transaction where the database takes one writer at a
        #: time: a thread waiting for it wakes the moment the writer before it commits
        self._writer = threading.RLock() if self.dialect.one_writer else None
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
        writer = self._writer if write else None
        # waiting for the lock counts like SQLite's own wait for a writer: as long, same error
        if writer is not None and not writer.acquire(timeout=BUSY_TIMEOUT_S):
            raise StoreError(
                f"database is busy: another writer of this process kept {self.url.path} "
                f"locked for more than {BUSY_TIMEOUT_S:g} s"
            )
        try:
            conn = self._acquire()
        except BaseException:
            if writer is not None:
                writer.release()
            raise
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
            if writer is not None:
                writer.release()

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
