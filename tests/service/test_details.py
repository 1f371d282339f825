"""`corral status` of an ended attempt reads its typed outcome: a stop reads as a stop."""

from __future__ import annotations

from typing import Any

import pytest

from corral.service.details import NOT_RUN, details
from corral.store import Store
from corral.wire.outcome import AttemptOutcome, OutcomeKind, StopCause

from .helpers import record_run

MISSING = {
    "report": "rep.json",
    "status": "missing",
    "error": "eval report rep.json was not written",
    "all_pass": False,
    "criteria": [
        {"metric": "val_loss", "op": "<=", "value": 3.0, "observed": None, "passed": False,
         "note": "eval report rep.json was not written"}
    ],
}  # fmt: skip


def _ended(store: Store, outcome: AttemptOutcome) -> Any:
    """A run whose one attempt ended with ``outcome``: the train stage exited 75 (the SDK's
    answer to SIGTERM), the evaluation never wrote its report."""
    run_id = record_run(store)
    status = {
        "stages": [
            {"name": "train", "state": "preempted", "exit_code": 75},
            {"name": "evaluate", "state": "cancelled", "exit_code": None},
        ],
        "acceptance": MISSING,
    }
    store.create_attempt(run_id, 1, provider="local", offer={}, price_per_hour=0.0,
                         data={"status": status, "outcome": outcome.model_dump(mode="json")})  # fmt: skip
    store.update_run(run_id, attempt=1)
    return details(store, store.get_run(run_id))


@pytest.mark.parametrize("cause", [StopCause.USER, StopCause.BUDGET, StopCause.IDLE])
def test_a_stage_that_exited_75_on_a_stop_is_shown_stopped_and_the_eval_not_run(cause) -> None:
    shown = _ended(Store.open(), AttemptOutcome(kind=OutcomeKind.STOPPED, reason=cause.value,
                                                cause=cause))  # fmt: skip
    assert [s["state"] for s in shown.stages] == ["stopped", "cancelled"]
    acc = shown.acceptance
    assert isinstance(acc, dict) and acc["status"] == NOT_RUN and not acc["all_pass"]
    assert acc["error"] == "the attempt stopped before writing rep.json"


def test_a_preempted_stage_stays_preempted() -> None:
    preempted = AttemptOutcome(kind=OutcomeKind.PREEMPTED, reason="preempted",
                               cause=StopCause.PREEMPTION)  # fmt: skip
    shown = _ended(Store.open(), preempted)
    assert shown.stages[0]["state"] == "preempted"


def test_a_succeeded_attempt_without_its_report_fails_its_acceptance() -> None:
    shown = _ended(Store.open(), AttemptOutcome(kind=OutcomeKind.SUCCEEDED, reason="ok"))
    assert shown.acceptance == MISSING


def test_the_details_of_one_run_read_that_run_only(monkeypatch) -> None:
    """``corral status RUN`` at any history size: the run's row (by id), its attempts; never
    a listing of runs."""
    from corral.service.details import get_run as details_of
    from corral.store import Store

    from .helpers import record_run

    store = Store.open()
    ids = [record_run(store, f"many{i}") for i in range(30)]
    read: list[str] = []
    real_get = Store.get_run

    def listing(self: Store, **kw: object) -> list:
        raise AssertionError("a listing of runs was read")

    def get(self: Store, ref: str, **kw: object) -> object:
        read.append(ref)
        return real_get(self, ref, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "list_runs", listing)
    monkeypatch.setattr(Store, "get_run", get)
    assert details_of(ids[7], store=store).id == ids[7]
    assert read == [ids[7]]
