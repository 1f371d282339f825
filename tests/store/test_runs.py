from __future__ import annotations

import re
import threading
from datetime import UTC, datetime

import pytest
from storekit import FakeClock, make_run

from corral.errors import BadInput, Conflict, NotFound, StoreError
from corral.store import ACTIVE_STATES, TERMINAL_STATES, RunState, Store


def test_create_run_is_pending_with_a_submitted_state_event(store: Store, clock: FakeClock):
    run = make_run(store, "quickstart")

    assert re.fullmatch(r"quickstart-[0-9a-f]{6}", run.id)
    assert (run.state, run.reason, run.attempt, run.cost_usd) == ("PENDING", "submitted", 0, 0.0)
    assert run.spec == {
        "name": "quickstart",
        "stages": [{"name": "train", "run": "python train.py"}],
    }
    assert run.completed_stages == []
    assert run.created_at == run.updated_at == clock.now
    assert run.created_at.tzinfo == UTC
    assert run.started_at is None and run.finished_at is None
    [event] = store.events(run.id)
    assert (event.type, event.reason, event.data) == (
        "run.state",
        "submitted",
        {"from": None, "to": "PENDING"},
    )
    assert event.ts == clock.now


def test_create_run_with_an_existing_id_conflicts(store: Store):
    make_run(store, run_id="fixed-000001")
    with pytest.raises(Conflict):
        make_run(store, run_id="fixed-000001")


def test_get_run_by_exact_id_unique_prefix_and_name(store: Store, clock: FakeClock):
    a = make_run(store, "alpha", run_id="alpha-aaa111")
    clock.advance(1)
    b = make_run(store, "alpha", run_id="alpha-bbb222")
    clock.advance(1)
    c = make_run(store, "beta", run_id="beta-ccc333")

    assert store.get_run("alpha-aaa111").id == a.id
    assert store.get_run("alpha-b").id == b.id
    assert store.get_run("beta").id == c.id  # unique prefix
    assert store.get_run("alpha").id == b.id  # ambiguous prefix, but the newest run so named
    assert store.get_run("alpha-b").spec is not None


def test_get_run_with_an_ambiguous_prefix_lists_the_candidates(store: Store):
    make_run(store, "gamma", run_id="gamma-aaa111")
    make_run(store, "gamma", run_id="gamma-aab222")

    with pytest.raises(Conflict) as err:
        store.get_run("gamma-aa")
    assert "gamma-aaa111" in str(err.value) and "gamma-aab222" in str(err.value)
    assert sorted(err.value.fields["candidates"]) == ["gamma-aaa111", "gamma-aab222"]


def test_get_run_without_a_match_is_not_found(store: Store):
    make_run(store, "delta")
    with pytest.raises(NotFound):
        store.get_run("epsilon")
    with pytest.raises(NotFound):
        store.get_run("")


def test_a_spec_that_is_not_plain_json_is_refused_and_nothing_is_written(store: Store):
    for bad in ({"when": datetime.now(UTC)}, {"lr": float("nan")}):
        with pytest.raises(StoreError):
            store.create_run(name="bad", spec=bad, spec_hash="h", spec_path="p", workdir="w")
    assert store.list_runs() == [] and store.events() == []


def test_list_runs_is_newest_first_and_filters_states(store: Store, clock: FakeClock):
    ids = []
    for i in range(4):
        clock.advance(1)
        ids.append(make_run(store, f"job{i}").id)
    store.transition(ids[0], "FAILED", "stage 'train' exited with code 3", exit_code=3)
    store.transition(ids[1], "PROVISIONING", "launching")

    assert [r.id for r in store.list_runs()] == ids[::-1]
    assert all(r.spec is None for r in store.list_runs())
    assert store.list_runs(with_spec=True)[0].spec is not None
    assert [r.id for r in store.list_runs(limit=2)] == [ids[3], ids[2]]
    assert [r.id for r in store.list_runs(states=["FAILED"])] == [ids[0]]
    assert [r.id for r in store.list_runs(active_only=True)] == ids[:0:-1]
    assert store.list_runs(states=["FAILED"], active_only=True) == []
    with pytest.raises(BadInput):
        store.list_runs(states=["DONE"])
    # count_runs counts what list_runs lists, without a limit
    assert store.count_runs() == 4 and store.count_runs(active_only=True) == 3
    assert store.count_runs(states=["FAILED"]) == 1
    assert store.count_runs(states=["FAILED"], active_only=True) == 0
    with pytest.raises(BadInput):
        store.count_runs(states=["DONE"])


def test_list_runs_pages_by_index_from_the_last_run_seen(store: Store, clock: FakeClock):
    ids = []
    for i in range(5):
        if i != 2:  # runs 1 and 2 share their creation time: the id breaks the tie
            clock.advance(1)
        ids.append(make_run(store, f"page{i}").id)
    newest_first = sorted(ids, key=lambda r: (store.get_run(r).created_at, r), reverse=True)
    pages, last = [], None
    while True:
        page = store.list_runs(limit=2, before=last)
        pages.append([r.id for r in page])
        if len(page) < 2:
            break
        last = page[-1]
    assert [rid for page in pages for rid in page] == newest_first
    assert (
        store.list_runs(active_only=True, before=store.get_run(newest_first[0]))[0].id
        == (newest_first[1])
    )
    assert (
        store.run_heads()
        == [(r.id, r.state, r.requested_action) for r in store.list_runs(active_only=True)][::-1]
    )


def test_transition_updates_fields_timestamps_and_writes_its_event(store: Store, clock: FakeClock):
    run = make_run(store)
    t1 = clock.advance(5)
    store.transition(run.id, "PROVISIONING", "launching", provider="local", attempt=1)
    t2 = clock.advance(5)
    running = store.transition(run.id, RunState.RUNNING, "agent ready", data={"endpoint": "x"})
    clock.advance(5)
    store.transition(run.id, "RECOVERING", "preempted")
    clock.advance(5)
    again = store.transition(run.id, "RUNNING", "resumed")
    t5 = clock.advance(5)
    done = store.transition(
        run.id, "SUCCEEDED", "all stages done", completed_stages=["prep", "train"], exit_code=0
    )

    assert running.started_at == t2 and again.started_at == t2  # only the first RUNNING
    assert running.finished_at is None
    assert (done.state, done.reason, done.exit_code) == ("SUCCEEDED", "all stages done", 0)
    assert done.completed_stages == ["prep", "train"]
    assert done.finished_at == t5 and done.updated_at == t5
    assert (done.provider, done.attempt) == ("local", 1)
    events = store.events(run.id, types=["run.state"])
    assert [(e.data["from"], e.data["to"]) for e in events] == [
        (None, "PENDING"),
        ("PENDING", "PROVISIONING"),
        ("PROVISIONING", "RUNNING"),
        ("RUNNING", "RECOVERING"),
        ("RECOVERING", "RUNNING"),
        ("RUNNING", "SUCCEEDED"),
    ]
    assert events[1].ts == t1 and events[1].attempt == 1 and events[1].reason == "launching"
    assert events[2].data == {"endpoint": "x", "from": "PROVISIONING", "to": "RUNNING"}


def test_transition_with_unmet_expectation_conflicts_and_changes_nothing(store: Store):
    run = make_run(store)
    with pytest.raises(Conflict):
        store.transition(run.id, "RUNNING", "ready", expect={"PROVISIONING"}, provider="x")

    after = store.get_run(run.id)
    assert (after.state, after.provider, after.updated_at) == ("PENDING", None, run.updated_at)
    assert len(store.events(run.id)) == 1


def test_terminal_run_never_changes_state(store: Store):
    run = make_run(store)
    store.transition(run.id, "CANCELLED", "user")
    with pytest.raises(Conflict):
        store.transition(run.id, "RUNNING", "late agent report")
    assert store.get_run(run.id).state == "CANCELLED"


def test_concurrent_transitions_from_threads_have_exactly_one_winner(store: Store):
    run = make_run(store)
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def claim(i: int) -> None:
        barrier.wait()
        try:
            store.transition(run.id, "PROVISIONING", f"claimed by {i}", expect={"PENDING"})
            outcomes.append("won")
        except Conflict:
            outcomes.append("lost")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(outcomes) == ["lost"] * 5 + ["won"]
    assert len(store.events(run.id, types=["run.state"])) == 2


def test_state_change_and_its_event_commit_together(store: Store, monkeypatch):
    run = make_run(store)

    def broken_event(*args, **kwargs):
        raise StoreError("event insert failed")

    monkeypatch.setattr(store, "_insert_event", broken_event)
    with pytest.raises(StoreError):
        store.transition(run.id, "PROVISIONING", "launching", provider="local")
    monkeypatch.undo()

    after = store.get_run(run.id)
    assert (after.state, after.provider) == ("PENDING", None)
    assert [e.data["to"] for e in store.events(run.id)] == ["PENDING"]


def test_transition_rejects_unknown_states_and_fields(store: Store):
    run = make_run(store)
    with pytest.raises(BadInput):
        store.transition(run.id, "DONE", "x")
    with pytest.raises(StoreError):
        store.transition(run.id, "RUNNING", "x", colour="red")
    with pytest.raises(NotFound):
        store.transition("nope-000000", "RUNNING", "x")


def test_update_run_sets_columns_without_state_change_or_event(store: Store, clock: FakeClock):
    run = make_run(store)
    lease_until = clock.advance(60)
    updated = store.update_run(
        run.id, cost_usd=1.25, lease_owner="ctl-1", lease_expires_at=lease_until
    )

    assert (updated.state, updated.cost_usd, updated.lease_owner) == ("PENDING", 1.25, "ctl-1")
    assert updated.lease_expires_at == lease_until and updated.updated_at == lease_until
    assert len(store.events(run.id)) == 1
    with pytest.raises(StoreError):
        store.update_run(run.id, state="RUNNING")
    with pytest.raises(NotFound):
        store.update_run("nope-000000", cost_usd=1.0)


def test_request_action_marks_an_active_run(store: Store):
    run = make_run(store)
    assert store.request_action(run.id, "cancel").requested_action == "cancel"
    assert store.request_action(run.id, "stop").requested_action == "stop"
    cleared = store.transition(run.id, "STOPPING", "user", requested_action=None, outcome="STOPPED")
    assert (cleared.requested_action, cleared.outcome) == (None, "STOPPED")
    with pytest.raises(BadInput):
        store.request_action(run.id, "pause")


def test_request_action_on_a_terminal_run_conflicts(store: Store):
    run = make_run(store)
    store.transition(run.id, "SUCCEEDED", "done")
    with pytest.raises(Conflict) as err:
        store.request_action(run.id, "cancel")
    assert "SUCCEEDED" in str(err.value)
    assert store.get_run(run.id).requested_action is None


def test_state_sets_partition_the_run_states():
    assert set(RunState) == TERMINAL_STATES | ACTIVE_STATES
    assert not TERMINAL_STATES & ACTIVE_STATES
    assert {"SUCCEEDED", "FAILED", "CANCELLED", "STOPPED"} == TERMINAL_STATES
