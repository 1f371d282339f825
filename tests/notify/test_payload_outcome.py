"""How an attempt or a run ended reaches webhooks from the attempt's recorded outcome."""

from __future__ import annotations

from hookkit import SECRET, FakeClock, hooked_run

from corral.notify.dispatcher import Dispatcher
from corral.notify.payloads import build, outcome_for
from corral.store import Store
from corral.wire.outcome import AttemptOutcome, OutcomeKind, StopCause

PREEMPTED = AttemptOutcome(
    kind=OutcomeKind.PREEMPTED,
    reason="preempted (stage 'train')",
    cause=StopCause.PREEMPTION,
    exit_code=75,
    failed_stage="train",
)
BUDGET = AttemptOutcome(kind=OutcomeKind.STOPPED, reason="budget", cause=StopCause.BUDGET)


def _attempt(store: Store, run_id: str, number: int, outcome: AttemptOutcome | None) -> None:
    data = {"outcome": outcome.model_dump(mode="json")} if outcome else {}
    store.create_attempt(run_id, number, provider="local", offer={}, price_per_hour=0.0, data=data)
    store.update_run(run_id, attempt=number)


def _deliver(store: Store, clock: FakeClock, receivers) -> list[dict]:
    rx = receivers(secret=SECRET)
    run_id = hooked_run(store, {"url": rx.url, "secret": "HOOK_SECRET"})
    _attempt(store, run_id, 1, PREEMPTED)
    # the event's own data says otherwise: the payload follows the attempt's outcome
    store.add_event(
        run_id, "run.recovering", "preempted", data={"kind": "failed", "exit_code": 1}, attempt=1
    )
    _attempt(store, run_id, 2, BUDGET)
    store.add_event(run_id, "run.finished", "stopped: budget", data={"state": "STOPPED"})
    d = Dispatcher(store, clock=clock, secret_resolver={"HOOK_SECRET": SECRET}.get)
    d.tick()
    d.run_pending()
    return [r.json for r in rx.accepted()]


def test_recovering_and_finished_payloads_describe_the_attempts_outcome(
    store, clock, receivers
) -> None:
    recovering, finished = _deliver(store, clock, receivers)
    assert recovering["data"] == {
        "kind": "preempted",
        "exit_code": 75,
        "outcome": {
            "kind": "preempted",
            "cause": "preemption",
            "exit_code": 75,
            "failed_stage": "train",
        },
    }
    # a run-level event: the run's last attempt
    assert finished["data"] == {
        "state": "STOPPED",
        "outcome": {"kind": "stopped", "cause": "budget", "exit_code": None, "failed_stage": None},
    }


def test_without_a_recorded_outcome_the_payload_keeps_the_events_fields(store) -> None:
    run_id = hooked_run(store, {"url": "http://127.0.0.1:9/"})
    event = store.add_event(run_id, "run.finished", "cancelled: user", data={"state": "CANCELLED"})
    assert outcome_for(store, event) is None  # ended before any attempt
    payload = build(event, run_name="hooked", webhook=0, outcome=None)
    assert payload["data"] == {"state": "CANCELLED"}


def test_other_events_never_carry_an_outcome(store) -> None:
    run_id = hooked_run(store, {"url": "http://127.0.0.1:9/"})
    _attempt(store, run_id, 1, PREEMPTED)
    event = store.add_event(run_id, "run.started", "up", attempt=1)
    assert outcome_for(store, event) is None
    assert build(event, run_name="hooked", webhook=0, outcome=PREEMPTED)["data"] == {}
