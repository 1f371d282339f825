"""The store side of webhooks: delivery cursors and the event feed position, on both databases."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from corral.errors import NotFound
from corral.store import Store

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/store.db"
    else:
        url = request.getfixturevalue("postgres_url")
    s = Store.open(url)
    try:
        yield s
    finally:
        s.close()


def _run(store: Store) -> str:
    return store.create_run(
        name="hooked", spec={"name": "hooked"}, spec_hash="h", spec_path="p", workdir="w"
    ).id


def test_cursor_moves_forward_only_and_counts_deliveries(store: Store):
    run_id = _run(store)
    assert store.webhook_cursors(run_id) == []
    ts = datetime(2026, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)
    c = store.advance_webhook_cursor(run_id, 1, 7, delivered=1, progress_ts=ts)
    assert (c.webhook, c.event_id, c.delivered, c.failed, c.progress_ts) == (1, 7, 1, 0, ts)
    same = store.advance_webhook_cursor(run_id, 1, 5, delivered=1, failed=1)
    assert (same.event_id, same.delivered, same.failed) == (7, 1, 0)
    c = store.advance_webhook_cursor(run_id, 1, 9, failed=1)
    assert (c.event_id, c.delivered, c.failed, c.progress_ts) == (9, 1, 1, ts)
    store.advance_webhook_cursor(run_id, 0, 3, delivered=1)
    assert [(r.webhook, r.event_id) for r in store.webhook_cursors(run_id)] == [(0, 3), (1, 9)]
    assert store.webhook_cursors(run_id)[1].to_dict()["progress_ts"] == ts.isoformat()


def test_cursor_of_an_unknown_run_is_not_found(store: Store):
    with pytest.raises(NotFound):
        store.advance_webhook_cursor("nope-000000", 0, 1, delivered=1)


def test_event_position_moves_forward_only(store: Store):
    assert store.event_position("webhooks") == 0  # fresh database: the newest event is 0
    assert store.event_position("other") == 0
    assert store.set_event_position("other", 12) == 12
    assert store.set_event_position("other", 4) == 12
    assert store.event_position("other") == 12


def test_concurrent_cursor_writers_keep_the_highest_position(store: Store):
    run_id = _run(store)
    later = datetime(2026, 5, 1, tzinfo=UTC) + timedelta(seconds=1)

    def write(ids: range) -> None:
        for i in ids:
            store.advance_webhook_cursor(run_id, 0, i, delivered=1, progress_ts=later)
            store.set_event_position("webhooks", i)

    threads = [threading.Thread(target=write, args=(range(s, 40, 2),)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (cursor,) = store.webhook_cursors(run_id)
    assert cursor.event_id == 39 and 1 <= cursor.delivered <= 39
    assert store.event_position("webhooks") == 39


def test_migration_starts_the_dispatcher_at_the_newest_existing_event(tmp_path: Path):
    from corral.store.migrate import _upgrade
    from corral.store.urls import parse_url

    url = f"sqlite:///{tmp_path}/old.db"
    _upgrade(parse_url(url), "0001")  # a database from before webhooks, with history
    import sqlite3

    conn = sqlite3.connect(tmp_path / "old.db")
    conn.execute(
        "INSERT INTO runs (id, name, state, reason, spec_hash, spec_path, workdir, attempt,"
        " cost_usd, completed_stages, created_at, updated_at, spec) VALUES ('r-1', 'r', "
        "'SUCCEEDED', 'x', 'h', 'p', 'w', 1, 0, '[]', '2026-01-01 00:00:00.000000', "
        "'2026-01-01 00:00:00.000000', '{}')"
    )
    for _ in range(3):
        conn.execute(
            "INSERT INTO events (run_id, ts, type, reason, data) VALUES "
            "('r-1', '2026-01-01 00:00:00.000000', 'run.finished', '', '{}')"
        )
    conn.commit()
    conn.close()
    with Store.open(url) as store:
        assert store.event_position("webhooks") == 3
