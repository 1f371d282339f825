"""Watching a run through the service: new log lines, fresh snapshots, one store."""

from __future__ import annotations

import pytest

from corral.errors import NotFound
from corral.service.watch import watch_run
from corral.store import Store

from .helpers import record_run, write_log


def test_a_watch_reads_new_lines_and_fresh_snapshots_from_the_store_it_was_given() -> None:
    store = Store.open()
    run_id = record_run(store)
    write_log(run_id, 1, "train", "2025-01-01T00:00:00Z before\n")
    with watch_run(run_id[:6], from_end=True, store=store) as watch:
        assert watch.run_id == run_id
        run, attempt = watch.snapshot()
        assert (run.state, attempt) == ("PENDING", None)
        write_log(run_id, 1, "train", "2025-01-01T00:00:01Z after\n")
        assert [line.text for line in watch.tailer.read()] == ["after"]
        store.transition(run_id, "CANCELLED", "user")
        assert watch.snapshot()[0].state == "CANCELLED"
    assert store.get_run(run_id).state == "CANCELLED"  # the caller's store is left open


def test_a_watch_of_a_missing_run_or_stage_is_not_found() -> None:
    run_id = record_run(Store.open())
    with pytest.raises(NotFound):
        watch_run("no-such-run")
    with pytest.raises(NotFound, match="has no stage 'eval'"):
        watch_run(run_id, stages=["eval"])
