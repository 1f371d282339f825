"""Bring a database to the schema this code knows, importing alembic only when there is work.

``ensure_schema`` reads ``alembic_version`` with a plain query and returns at once when it
holds ``HEAD``, so opening an up-to-date database never imports alembic or SQLAlchemy.
Otherwise it takes a lock (a file next to the SQLite database, ``pg_advisory_lock`` on
PostgreSQL), checks again, and runs ``alembic upgrade head`` in one transaction.

Adding a migration (see ``docs/store.md``)::

    python -m corral.store revision -m "add runs.priority"   # autogenerate from schema.py
    # review the new file in migrations/versions/, then add it to REVISIONS below
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corral.errors import StoreError
from corral.store.db import Database
from corral.store.urls import DbUrl, parse_url, scrub

#: Every revision this code knows, oldest first. The last one is the head; a test checks that
#: this tuple matches alembic's own history in ``migrations/versions``.
REVISIONS: tuple[str, ...] = (
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
)
HEAD = REVISIONS[-1]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_PG_MIGRATE_LOCK = 0x636F7272616C00


def current_revisions(db: Database) -> set[str]:
    """The revisions recorded in ``alembic_version`` (empty for a fresh database)."""
    if db.dialect.name == "sqlite":
        probe = (
            "SELECT name AS t FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
        )
    else:
        probe = "SELECT to_regclass('alembic_version') AS t"
    with db.transaction() as tx:
        row = tx.one(probe)
        if row is None or row["t"] is None:
            return set()
        return {r["version_num"] for r in tx.all("SELECT version_num FROM alembic_version")}


def _check_known(db: Database, revs: set[str]) -> None:
    unknown = revs - set(REVISIONS)
    if unknown:
        raise StoreError(
            f"the database {db.url.masked} is at schema revision {', '.join(sorted(unknown))}, "
            f"newer than this corral knows (head {HEAD}): upgrade corral"
        )


def ensure_schema(db: Database) -> None:
    """Migrate ``db`` to ``HEAD`` unless it is there already; safe from several processes."""
    revs = current_revisions(db)
    if revs == {HEAD}:
        return
    _check_known(db, revs)
    with _migration_lock(db):
        revs = current_revisions(db)
        if revs == {HEAD}:
            return
        _check_known(db, revs)
        _upgrade(db.url)
    if current_revisions(db) != {HEAD}:
        raise StoreError(f"migrating {db.url.masked} did not reach schema revision {HEAD}")


@contextlib.contextmanager
def _migration_lock(db: Database) -> Iterator[None]:
    if db.dialect.name == "sqlite":
        assert db.url.path is not None
        with _file_lock(db.url.path.with_name(db.url.path.name + ".migrate.lock")):
            yield
        return
    conn = db.dialect.connect()
    try:
        conn.autocommit = True
        conn.execute("SELECT pg_advisory_lock(%(k)s)", {"k": _PG_MIGRATE_LOCK})
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%(k)s)", {"k": _PG_MIGRATE_LOCK})
    except db.dialect.errors as exc:
        raise StoreError(db.dialect.describe(exc)) from None
    finally:
        conn.close()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): BEGIN IMMEDIATE in _upgrade still serialises
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def alembic_config(connection: Any = None) -> Any:
    """An alembic ``Config`` for the packaged migrations (no alembic.ini needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def migration_engine(db_url: DbUrl) -> Any:
    """A SQLAlchemy engine for alembic. On SQLite, transactions really begin (IMMEDIATE), so
    a migration is all-or-nothing and two migrating processes queue on the lock."""
    import sqlalchemy as sa

    if db_url.dialect != "sqlite":
        return sa.create_engine(db_url.url, poolclass=sa.pool.NullPool)
    assert db_url.path is not None
    db_url.path.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        db_url.url, poolclass=sa.pool.NullPool, connect_args={"timeout": 10.0}
    )

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        for pragma in ("busy_timeout = 10000", "foreign_keys = ON", "journal_mode = WAL"):
            dbapi_conn.execute(f"PRAGMA {pragma}")

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _upgrade(db_url: DbUrl, target: str = "head") -> None:
    from alembic import command

    engine = migration_engine(db_url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), target)
    except StoreError:
        raise
    except Exception as exc:
        first = scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0], db_url.password)
        raise StoreError(f"migrating the database {db_url.masked} failed: {first}") from None
    finally:
        engine.dispose()


def autogenerate(message: str) -> None:
    """Write a new revision: the difference between ``schema.py`` and the migrations' head."""
    import tempfile

    from alembic import command

    with tempfile.TemporaryDirectory() as tmp:
        db_url = parse_url(f"sqlite:///{tmp}/autogen.db")
        _upgrade(db_url)
        engine = migration_engine(db_url)
        try:
            with engine.begin() as conn:
                rev_id = f"{len(REVISIONS) + 1:04d}"
                command.revision(
                    alembic_config(conn), message=message, autogenerate=True, rev_id=rev_id
                )
        finally:
            engine.dispose()
