from __future__ import annotations

import pytest
from storekit import FakeClock, make_run

from corral.errors import BadInput, Conflict, NotFound
from corral.store import Store

INSTANCE = {"provider": "aws", "instance_id": "i-0abc", "key": "r-1", "endpoint": None}


def test_intent_is_written_once_per_key(store: Store, clock: FakeClock):
    run = make_run(store)
    first = store.record_intent(
        run_id=run.id, attempt=1, provider="aws", key="run-1", data={"offer": "g5"}
    )
    store.update_resource("run-1", state="active", instance_id="i-0abc")
    clock.advance(10)
    again = store.record_intent(run_id=run.id, attempt=1, provider="aws", key="run-1")

    assert (first.state, first.instance_id, first.data) == ("intent", None, {"offer": "g5"})
    assert (again.id, again.state, again.instance_id) == (first.id, "active", "i-0abc")
    assert again.created_at == first.created_at
    assert len(store.resources(run_id=run.id)) == 1


def test_an_intent_is_claimed_by_the_one_launcher_that_writes_it(store: Store):
    """Two launchers of one attempt's node (the CLI and a controller): the first to write
    the key's intent launches it, the other is told another one does."""
    run = make_run(store)
    other = make_run(store, "other")
    first = store.claim_intent(run_id=run.id, attempt=1, provider="aws", key="k", data={"n": 1})
    assert first is not None and (first.state, first.data) == ("intent", {"n": 1})
    assert store.claim_intent(run_id=run.id, attempt=1, provider="aws", key="k") is None
    assert store.record_intent(run_id=run.id, attempt=1, provider="aws", key="k").id == first.id
    with pytest.raises(Conflict):
        store.claim_intent(run_id=other.id, attempt=1, provider="aws", key="k")
    assert len(store.resources(run_id=run.id)) == 1


def test_intent_key_of_another_run_conflicts(store: Store):
    a = make_run(store, "a")
    b = make_run(store, "b")
    store.record_intent(run_id=a.id, attempt=1, provider="aws", key="shared")
    with pytest.raises(Conflict):
        store.record_intent(run_id=b.id, attempt=1, provider="aws", key="shared")
    with pytest.raises(NotFound):
        store.record_intent(run_id="ghost-000000", attempt=1, provider="aws", key="k2")


def test_resource_lifecycle_and_open_resources(store: Store, clock: FakeClock):
    run = make_run(store)
    other = make_run(store, "other")
    for key, rid in (("k1", run.id), ("k2", run.id), ("k3", other.id)):
        store.record_intent(run_id=rid, attempt=1, provider="aws", key=key)
    t = clock.advance(3)

    active = store.update_resource("k1", state="active", instance_id="i-0abc", instance=INSTANCE)
    store.update_resource("k2", state="terminating")
    gone = store.update_resource("k2", state="gone")

    assert (active.state, active.instance, active.updated_at) == ("active", INSTANCE, t)
    assert gone.state == "gone" and not gone.open
    assert [r.key for r in store.resources(open_only=True)] == ["k1", "k3"]
    assert [r.key for r in store.resources(run_id=run.id, open_only=True)] == ["k1"]
    assert [r.key for r in store.resources(run_id=run.id)] == ["k1", "k2"]
    assert store.get_resource("k1") == active


def test_gone_resource_cannot_come_back(store: Store):
    run = make_run(store)
    store.record_intent(run_id=run.id, attempt=1, provider="aws", key="k")
    store.update_resource("k", state="gone")
    with pytest.raises(Conflict):
        store.update_resource("k", state="active")
    assert store.update_resource("k", state="gone").state == "gone"


def test_update_resource_rejects_unknown_keys_and_states(store: Store):
    with pytest.raises(NotFound):
        store.update_resource("missing", state="gone")
    with pytest.raises(BadInput):
        store.update_resource("missing", state="exploded")
