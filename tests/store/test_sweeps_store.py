"""Sweeps in the store (SQLite and PostgreSQL): a trial is created once with its run, however
many controllers try; a sweep's name is taken once."""

from __future__ import annotations

import pytest

from corral.errors import Conflict, NotFound
from corral.store import Store

JOB = {"name": "lr", "run": "true", "workdir": "/tmp"}


def _trial(store: Store, number: int) -> str | None:
    return store.start_trial(
        "lr", number, params={"env.LR": 0.1}, spec=JOB, spec_hash="h", spec_path="/s.yaml",
        workdir="/tmp", owner="bob", project="p",
    )  # fmt: skip


def test_a_trial_and_its_run_are_created_once(store: Store) -> None:
    store.add_sweep(name="lr", sweep={"x": 1}, job=JOB, spec_path="/s.yaml", owner="bob")
    with pytest.raises(Conflict, match="a sweep named 'lr' exists"):
        store.add_sweep(name="lr", sweep={}, job=JOB, spec_path="/s.yaml", owner=None)
    run_id = _trial(store, 0)
    assert run_id is not None
    assert _trial(store, 0) is None  # another controller came second: nothing created
    [trial] = store.trials("lr")
    assert (trial.run_id, trial.state, trial.params) == (run_id, "running", {"env.LR": 0.1})
    assert [r.id for r in store.list_runs()] == [run_id]
    assert store.run_owner(run_id) == ("bob", "p")
    assert store.events(run_id, types=["sweep.trial"])[0].data["trial"] == 0
    store.update_trial("lr", 0, state="complete", value=0.5, intermediate={"3": 0.5})
    assert store.trials("lr")[0].intermediate == {"3": 0.5}
    assert store.update_sweep("lr", expect=("STOPPING",), state="STOPPED") is None
    assert store.update_sweep("lr", expect=("RUNNING",), state="FINISHED") is not None
    assert store.sweeps(active_only=True) == []
    with pytest.raises(NotFound, match="no sweep named 'nope'"):
        store.get_sweep("nope")
