"""Every store test runs on SQLite and on the local PostgreSQL server.

``fresh_db_url`` is an empty database (SQLite: a new file; PostgreSQL: the shared
``postgres_url`` fixture). Most tests only need a migrated, empty database: ``db_url`` gives a
copy of a migrated SQLite file, or one PostgreSQL database per test session emptied with
TRUNCATE before each test, which keeps the suite fast (creating and migrating a database per
test costs about half a second on PostgreSQL).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from storekit import FakeClock

from corral.store import Store
from support.postgres import scratch_database

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
TABLES = (
    "runs, attempts, events, resources, schedules, event_positions, spending_caps, sweeps, "
    "gpu_series, controllers"
)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def fresh_db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/fresh.db"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def _postgres_shared() -> Iterator[str]:
    with scratch_database("corral_ts_") as url:
        Store.open(url).close()
        yield url


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database at head with no rows."""
    if backend == "sqlite":
        path = tmp_path / "store.db"
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("_postgres_shared")
    import psycopg

    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
    return url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(db_url: str, clock: FakeClock) -> Iterator[Store]:
    s = Store.open(db_url, clock=clock)
    try:
        yield s
    finally:
        s.close()
