from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from storekit import make_run, run_python, start_python

from corral.errors import StoreError
from corral.store import HEAD, Store
from corral.store.db import Database
from corral.store.migrate import REVISIONS, alembic_config, current_revisions, migration_engine
from corral.store.records import COLUMNS
from corral.store.urls import parse_url


def test_fresh_database_is_migrated_to_head(fresh_db_url: str):
    db = Database(parse_url(fresh_db_url))
    try:
        assert current_revisions(db) == set()
        with Store.open(fresh_db_url) as store:
            make_run(store)
        assert current_revisions(db) == {HEAD}
    finally:
        db.close()


def test_head_constant_is_alembic_head_and_revisions_are_its_history():
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == [HEAD]
    history = [rev.revision for rev in script.walk_revisions()]  # newest first
    assert tuple(reversed(history)) == REVISIONS


def test_migrated_schema_matches_schema_metadata(store: Store, db_url: str):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from corral.store.schema import metadata

    engine = migration_engine(parse_url(db_url))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
    finally:
        engine.dispose()


def test_record_columns_match_schema_tables():
    from corral.store.schema import metadata

    for name, columns in COLUMNS.items():
        assert tuple(c.name for c in metadata.tables[name].columns) == columns


def test_opening_an_up_to_date_database_loads_neither_alembic_nor_sqlalchemy(db_url: str):
    with Store.open(db_url) as store:
        make_run(store)
    out = run_python(
        f"""
        import json, sys
        from corral.store import Store
        with Store.open({db_url!r}) as store:
            runs = store.list_runs()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("alembic", "sqlalchemy"))
        print(json.dumps({{"runs": len(runs), "loaded": loaded}}))
        """
    )
    assert json.loads(out) == {"runs": 1, "loaded": []}


def test_current_command_prints_the_database_revision(db_url: str, capsys):
    from corral.store.__main__ import main

    main(["current", "--url", db_url])
    assert capsys.readouterr().out.strip().endswith(f": {HEAD}")


def test_database_newer_than_this_code_is_refused(fresh_db_url: str):
    with Store.open(fresh_db_url) as store, store._db.transaction(write=True) as tx:
        tx.run("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError) as err:
        Store.open(fresh_db_url)
    assert "9999" in str(err.value) and "newer" in str(err.value)


@pytest.mark.slow
def test_two_processes_opening_a_fresh_database_both_succeed(fresh_db_url: str, tmp_path: Path):
    db_url = fresh_db_url
    go = tmp_path / "go"
    code = f"""
        import os, sys, time
        import alembic.command, sqlalchemy  # loaded up front so both race on the upgrade itself
        from corral.store import Store
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        with Store.open({db_url!r}) as store:
            store.create_run(name="racer", spec={{}}, spec_hash="h", spec_path="p", workdir="w")
        print("done", flush=True)
        """
    procs = [start_python(code) for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    with Store.open(db_url) as store:
        assert len(store.list_runs()) == 2


def test_listing_a_thousand_runs_leaves_the_specs_out(store: Store, clock):
    """(How fast is benchmarks/launch_overhead.py's business: no timing in unit tests.)"""
    spec = {"stages": [{"name": f"s{i}", "run": "python train.py --x " * 50} for i in range(20)]}
    with store._db.transaction(write=True) as tx:
        for i in range(1000):
            values = {
                **dict.fromkeys(COLUMNS["runs"]),
                **dict(id=f"bulk-{i:06x}", name="bulk", state="RUNNING", reason="", spec=spec),
                **dict(spec_hash="h", spec_path="p", workdir="w", attempt=1, cost_usd=0.5),
                **dict(completed_stages=["s0"], created_at=clock(), updated_at=clock()),
            }
            store._insert(tx, "runs", values)
    runs = store.list_runs()
    assert len(runs) == 1000 and runs[0].spec is None and runs[0].completed_stages == ["s0"]
    assert store.list_runs(with_spec=True)[0].spec == spec


def test_the_active_runs_index_is_spelled_as_the_queries_that_use_it():
    """SQLite uses a partial index only for a query with its very term: the revision that
    made ``ix_runs_active`` and the listing of the unfinished runs say the same."""
    import importlib.util

    from corral.store.migrate import alembic_config
    from corral.store.states import ACTIVE_RUNS_SQL

    folder = Path(alembic_config().get_main_option("script_location") or "") / "versions"
    spec = importlib.util.spec_from_file_location("rev0004", folder / "0004_active_runs_index.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ACTIVE == ACTIVE_RUNS_SQL


def test_listing_the_newest_active_runs_reads_the_partial_index(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/a.db"
    with Store.open(url) as store:
        ids = [make_run(store).id for _ in range(5)]
        store.transition(ids[1], "PROVISIONING", "launching")
        for run_id in ids[2:4]:
            store.transition(run_id, "CANCELLED", "by the user")
        listed = [r.id for r in store.list_runs(active_only=True, limit=10)]
        newest_first = sorted(
            (store.get_run(i) for i in (ids[0], ids[1], ids[4])),
            key=lambda r: (r.created_at, r.id),
            reverse=True,
        )
        with store._db.transaction() as tx:
            plan = tx.tuples(
                "EXPLAIN QUERY PLAN SELECT id FROM runs"
                + store._db.dialect.active_runs_hint
                + " WHERE state IN ('PENDING', 'PROVISIONING', 'RECOVERING', 'RUNNING',"
                " 'STOPPING') ORDER BY created_at DESC, id DESC LIMIT 3"
            )
    assert listed == [r.id for r in newest_first]
    assert any("ix_runs_active" in str(row) for row in plan)


@contextmanager
def _queries_read() -> Iterator[list[str]]:
    """The SQL of every read of rows (``Tx.tuples``) made while inside, in order."""
    from corral.store.db import Tx

    asked: list[str] = []
    real = Tx.tuples

    def seen(self: Tx, sql: str, params: dict[str, object] | None = None) -> list[tuple]:
        asked.append(sql)
        return real(self, sql, params)

    Tx.tuples = seen  # type: ignore[method-assign]
    try:
        yield asked
    finally:
        Tx.tuples = real  # type: ignore[method-assign]


def test_the_loops_read_of_the_active_runs_is_the_index_alone(tmp_path: Path):
    """``Store.run_heads`` (every tick of the controller's loop, over every active run) reads
    the unfinished runs' index and nothing else: no table row, no sort; a waiting run's
    priority is read from its spec once."""
    with Store.open(f"sqlite:///{tmp_path}/a.db") as store:
        ids = [make_run(store).id for _ in range(4)]
        urgent = store.create_run(
            name="urgent",
            spec={"name": "urgent", "priority": 9},
            spec_hash="x",
            spec_path="u.yaml",
            workdir="/jobs",
        ).id
        store.transition(ids[0], "PROVISIONING", "launching")
        store.transition(ids[1], "CANCELLED", "by the user")
        with _queries_read() as asked:
            heads = store.run_heads()
            first = list(asked)
            asked.clear()
            assert store.run_heads() == heads
        assert [h[0] for h in heads] == [urgent, ids[0], ids[2], ids[3]]
        assert len(first) == 2 and len(asked) == 1  # the priorities, once
        with store._db.transaction() as tx:
            plan = " ".join(str(row) for row in tx.tuples("EXPLAIN QUERY PLAN " + asked[0]))
    assert "COVERING INDEX ix_runs_active" in plan and "TEMP B-TREE" not in plan, plan


def test_a_controllers_read_of_its_runs_is_the_leases_index_alone(tmp_path: Path):
    """``Store.run_heads(owner)`` (each tick of a controller sharing the store) reads two
    ranges of ``ix_runs_leases``, its own runs and the free ones: no table row, none of the
    runs another controller holds."""
    with Store.open(f"sqlite:///{tmp_path}/a.db") as store:
        ids = [make_run(store).id for _ in range(4)]
        assert len(store.lease_runs("ctl-a", 20)) == 4  # alone: all four
        assert store.lease_runs("ctl-b", 20) == set()  # B joins: nothing free
        new = make_run(store).id  # nobody's yet
        with _queries_read() as asked:
            heads = store.run_heads("ctl-a")
            theirs = store.run_heads("ctl-b")
        assert [h[0] for h in heads] == [*ids, new]
        assert [h[0] for h in theirs] == [new]  # the free one only
        with store._db.transaction() as tx:
            plan = " ".join(
                str(row) for row in tx.tuples("EXPLAIN QUERY PLAN " + asked[0], {"me": "ctl-a"})
            )
    assert plan.count("COVERING INDEX ix_runs_leases") == 2, plan
