"""Scratch databases on the local PostgreSQL server (``CORRAL_TEST_PG``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """Create an empty database named ``<prefix><random>`` on the local PostgreSQL server (the
    server is required: nothing is skipped), yield its URL, and drop it, ending its sessions."""
    import uuid

    import sqlalchemy as sa

    base = os.environ.get("CORRAL_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    name = prefix + uuid.uuid4().hex[:10]
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = base.rsplit("/", 1)[0] + "/" + name
    try:
        yield url
    finally:
        with admin.connect() as c:
            c.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
                ),
                {"n": name},
            )
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()
