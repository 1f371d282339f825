"""Choosing the database, SQLite's settings, passwords in errors, several processes at once."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from storekit import make_run, start_python

from corral.errors import StoreError
from corral.store import Store
from corral.store.urls import mask_url, parse_url


def test_default_database_is_sqlite_under_corral_home(corral_home: Path):
    with Store.open() as store:
        make_run(store)
        assert store.dialect == "sqlite"
        assert store.url == f"sqlite:///{corral_home.resolve() / 'corral.db'}"
    assert (corral_home / "corral.db").exists()


def test_database_url_env_var_selects_the_database(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CORRAL_DATABASE_URL", f"sqlite:///{tmp_path}/elsewhere.db")
    with Store.open() as store:
        make_run(store)
    assert (tmp_path / "elsewhere.db").exists()


def test_sqlite_runs_in_wal_mode_with_busy_timeout_and_foreign_keys(tmp_path: Path):
    with Store.open(f"sqlite:///{tmp_path}/c.db") as store, store._db.transaction() as tx:
        pragmas = {
            p: next(iter(tx.one(f"PRAGMA {p}").values()))
            for p in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
        }
    assert pragmas == {
        "journal_mode": "wal",
        "busy_timeout": 10000,
        "foreign_keys": 1,
        "synchronous": 1,
    }
    plain = sqlite3.connect(tmp_path / "c.db")  # WAL is a property of the file
    assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    plain.close()


def test_postgres_urls_are_normalised_for_psycopg():
    for raw in (
        "postgresql://u:pw@db:5432/corral",
        "postgres://u:pw@db:5432/corral",
        "postgresql+psycopg://u:pw@db:5432/corral",
    ):
        url = parse_url(raw)
        assert url.url == "postgresql+psycopg://u:pw@db:5432/corral"
        assert url.conninfo == "postgresql://u:pw@db:5432/corral"
        assert url.masked == "postgresql+psycopg://u:***@db:5432/corral"
        assert url.password == "pw"


@pytest.mark.parametrize(
    "raw",
    ["mysql://u@h/db", "sqlite://", "sqlite:///:memory:", "no-scheme", "postgresql+asyncpg://h/db"],
)
def test_unsupported_database_urls_are_refused(raw: str):
    with pytest.raises(StoreError):
        parse_url(raw)


def test_mask_url_hides_only_the_password():
    assert mask_url("postgresql://alice:p%40ss@h:5/db?sslmode=require") == (
        "postgresql://alice:***@h:5/db?sslmode=require"
    )
    assert mask_url("postgresql://alice@h/db") == "postgresql://alice@h/db"
    assert mask_url("postgresql://h/db?sslmode=require&password=x%26y") == (
        "postgresql://h/db?sslmode=require&password=***"
    )
    assert parse_url("postgresql://h/db?password=x%26y").password == "x&y"
    assert parse_url("postgresql://u:p%40ss@h/db").password == "p@ss"


@pytest.mark.postgres
@pytest.mark.parametrize(
    "where",
    ["127.0.0.1:1/corral", "127.0.0.1:5432/corral_no_such_db_9f3"],  # nothing listening; no db
)
def test_password_never_appears_in_connection_errors(where: str):
    secret = "s3cr3t-Pa55"
    for url in (
        f"postgresql://postgres:{secret}@{where}",
        f"postgresql://{where}?password={secret}",
    ):
        with pytest.raises(StoreError) as err:
            Store.open(url)
        message = str(err.value)
        assert secret not in message and secret not in repr(err.value)
        assert "***" in message and where.split("/")[0] in message
        assert err.value.__cause__ is None and err.value.__suppress_context__


@pytest.mark.slow
def test_two_processes_creating_runs_on_sqlite_never_see_database_locked(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/shared.db"
    Store.open(url).close()
    go = tmp_path / "go"
    code = f"""
        import json, os, time
        from corral.store import Store
        store = Store.open({url!r})
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        ids = []
        for i in range(60):
            run = store.create_run(name="par", spec={{"i": i}}, spec_hash="h", spec_path="p", workdir="w")
            store.transition(run.id, "PROVISIONING", "launching", expect={{"PENDING"}})
            store.add_event(run.id, "progress", data={{"i": i}})
            ids.append(run.id)
        print(json.dumps(ids), flush=True)
        """
    procs = [start_python(code) for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    outputs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    ids = [run_id for out, _ in outputs for run_id in json.loads(out)]
    with Store.open(url) as store:
        assert sorted(r.id for r in store.list_runs()) == sorted(ids)
        assert len(ids) == 120
        assert all(r.state == "PROVISIONING" for r in store.list_runs())
        assert len(store.events()) == 360


def test_concurrent_transitions_from_processes_have_exactly_one_winner(db_url: str, tmp_path: Path):
    with Store.open(db_url) as store:
        run = make_run(store)
    go = tmp_path / "go"
    code = f"""
        import os, time
        from corral.errors import Conflict
        from corral.store import Store
        store = Store.open({db_url!r})
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.002)
        try:
            store.transition({run.id!r}, "PROVISIONING", str(os.getpid()), expect={{"PENDING"}})
            print("won")
        except Conflict:
            print("lost")
        """
    procs = [start_python(code) for _ in range(3)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outputs]
    assert sorted(out.strip() for out, _ in outputs) == ["lost", "lost", "won"]
    with Store.open(db_url) as store:
        assert len(store.events(run.id, types=["run.state"])) == 2


def test_a_processs_sqlite_writers_queue_on_a_lock_and_readers_never_wait(tmp_path: Path):
    """Threads of one process take SQLite's one write transaction in turn on a lock of their
    own (a waiting writer starts the moment the one before commits, instead of sleeping in
    SQLite's busy handler); a read goes on while a write is open."""
    import threading

    from corral.store.db import Database

    db = Database(parse_url(f"sqlite:///{tmp_path}/w.db"))
    with db.transaction(write=True) as tx:
        tx.run("CREATE TABLE t (v INTEGER)")
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def first() -> None:
        with db.transaction(write=True) as tx:
            tx.run("INSERT INTO t VALUES (1)")
            holding.set()
            release.wait(10)
            order.append("first commits")

    def second() -> None:
        with db.transaction(write=True) as tx:
            order.append("second begins")
            tx.run("INSERT INTO t VALUES (2)")

    a = threading.Thread(target=first)
    a.start()
    assert holding.wait(10)
    b = threading.Thread(target=second)
    b.start()
    b.join(0.3)
    assert b.is_alive() and order == []  # the second writer waits for the lock
    assert db._writer is not None and not db._writer.acquire(blocking=False)
    with db.transaction() as tx:  # a reader does not
        assert tx.tuples("SELECT v FROM t") == []
    release.set()
    a.join(10)
    b.join(10)
    assert order == ["first commits", "second begins"]
    with db.transaction() as tx:
        assert tx.tuples("SELECT v FROM t ORDER BY v") == [(1,), (2,)]
    db.close()


def test_a_write_transaction_that_fails_to_open_leaves_the_writer_lock_free(tmp_path: Path):
    from corral.store.db import Database

    db = Database(parse_url(f"sqlite:///{tmp_path}/w.db"))
    db.close()
    with pytest.raises(StoreError, match="closed"), db.transaction(write=True):
        pass
    assert db._writer is not None and db._writer.acquire(blocking=False)


def test_a_writer_that_waits_too_long_for_the_lock_gets_the_busy_error(tmp_path: Path, monkeypatch):
    """Waiting behind another thread's write transaction ends like SQLite's own wait for a
    writer: after the busy timeout, with its one-line error, never a hang."""
    import threading

    from corral.store import db as dbmod

    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_S", 0.2)
    db = dbmod.Database(parse_url(f"sqlite:///{tmp_path}/w.db"))
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with db.transaction(write=True):
            holding.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    assert holding.wait(10)
    try:
        with pytest.raises(StoreError, match="database is busy"), db.transaction(write=True):
            pass
    finally:
        release.set()
        t.join(10)
    with db.transaction(write=True) as tx:  # the lock is free again
        tx.run("CREATE TABLE t (v INTEGER)")
    db.close()
