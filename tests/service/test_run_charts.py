"""What a run's page draws: curves from progress events (loss-like metrics with the loss,
val/eval metrics apart, diverged values left out, one series per stage when several report,
thinned to a bound), the cost line through the attempts, and the timeline of every attempt
with its stages, its outcome and the marks between attempts."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.service import run_charts
from corral.service.overview import Verdict, progress_of, verdict_of
from corral.store import Store


def make(store: Store) -> str:
    run = store.create_run(name="r", spec={}, spec_hash="x", spec_path="x", workdir="/")
    return run.id


def progress(store: Store, run_id: str, step: int, stage: str = "train", **kw: object) -> None:
    data = {"stage": stage, "step": step, "total": 100} | kw
    store.add_event(run_id, "progress", data=data, attempt=1)


def test_curves_split_loss_and_validation_and_skip_diverged_values(corral_home) -> None:
    store = Store.open()
    try:
        rid = make(store)
        progress(store, rid, 1, loss=2.0, metrics={"val_loss": 2.2, "eval_wer": 0.5, "lr": 1e-4})
        progress(store, rid, 2, loss="nan", metrics={"val_loss": 2.1})
        progress(store, rid, 3, loss=1.5, metrics={"eval_wer": True})  # not a number
        charts = run_charts.run_charts(rid, store=store)
    finally:
        store.close()
    assert {s.name: s.points for s in charts.loss} == {
        "loss": [(1.0, 2.0), (3.0, 1.5)],
        "val_loss": [(1.0, 2.2), (2.0, 2.1)],
    }
    assert {s.name: s.points for s in charts.validation} == {"eval_wer": [(1.0, 0.5)]}
    assert (charts.step, charts.total) == (3, 100)


def test_several_stages_get_a_series_each_and_long_series_are_thinned(
    corral_home, monkeypatch
) -> None:
    monkeypatch.setattr(run_charts, "MAX_POINTS", 10)
    store = Store.open()
    try:
        rid = make(store)
        for step in range(1, 26):
            progress(store, rid, step, loss=1.0 / step)
        progress(store, rid, 1, stage="eval", loss=0.9)
        charts = run_charts.run_charts(rid, store=store)
    finally:
        store.close()
    series = {s.name: s.points for s in charts.loss}
    assert set(series) == {"train loss", "eval loss"}
    assert len(series["train loss"]) == 10 and series["train loss"][-1] == (25.0, 0.04)
    assert series["train loss"][0] == (1.0, 1.0)


def test_the_cost_line_runs_through_the_attempts(corral_home) -> None:
    t = [datetime(2026, 1, 1, 10, 0, tzinfo=UTC)]
    store = Store.open(clock=lambda: t[0])
    try:
        rid = make(store)
        store.create_attempt(rid, 1, provider="p", offer={}, price_per_hour=0.0)
        t[0] = datetime(2026, 1, 1, 11, 0, tzinfo=UTC)
        store.update_attempt(rid, 1, cost_usd=2.0, ended_at=t[0])
        t[0] = datetime(2026, 1, 1, 11, 30, tzinfo=UTC)
        store.create_attempt(rid, 2, provider="p", offer={}, price_per_hour=0.0)
        store.update_attempt(rid, 2, cost_usd=0.5)
        now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        cost = run_charts.run_charts(rid, store=store, now=now).cost
    finally:
        store.close()
    hour = 3600.0
    start = datetime(2026, 1, 1, 10, 0, tzinfo=UTC).timestamp()
    assert cost.points == [
        (start, 0.0),
        (start + hour, 2.0),
        (start + 1.5 * hour, 2.0),
        (start + 2 * hour, 2.5),
    ]


def test_the_timeline_has_every_attempt_its_stages_outcome_and_marks(corral_home) -> None:
    store = Store.open()
    try:
        rid = make(store)
        store.create_attempt(rid, 1, provider="fake", offer={}, price_per_hour=1.0)
        store.add_event(rid, "stage.started", data={"stage": "train"}, attempt=1)
        store.add_event(rid, "instance.preempting", "spot notice", attempt=1)
        store.add_event(
            rid, "stage.finished", data={"stage": "train", "state": "preempted"}, attempt=1
        )
        outcome = {"kind": "preempted", "reason": "the cloud took the machine back"}
        store.update_attempt(rid, 1, data={"outcome": outcome}, ended_at=datetime.now(UTC))
        store.add_event(rid, "run.recovering", "preempted: attempt 2", attempt=1)
        store.create_attempt(rid, 2, provider="fake", offer={}, price_per_hour=1.0)
        store.add_event(rid, "stage.started", data={"stage": "train"}, attempt=2)
        timeline = run_charts.run_timeline(rid, store=store)
    finally:
        store.close()
    first, second = timeline.attempts
    assert (first.outcome, first.reason) == ("preempted", "the cloud took the machine back")
    assert [(s.name, s.state) for s in first.stages] == [("train", "preempted")]
    assert first.stages[0].started_at and first.stages[0].finished_at
    assert second.outcome is None and [(s.name, s.state) for s in second.stages] == [
        ("train", "running")
    ]
    assert [(m.kind, m.attempt) for m in timeline.marks] == [("preemption", 1), ("recovery", 1)]


def test_the_table_shows_the_running_stage_progress() -> None:
    class Attempt:
        data = {
            "status": {
                "stages": [
                    {"name": "prep", "state": "succeeded", "progress": {"step": 5, "total": 5}},
                    {"name": "train", "state": "running", "progress": {"step": 7, "percent": 7.0}},
                    {"name": "eval", "state": "pending", "progress": None},
                ]
            }
        }

    got = progress_of(Attempt())  # type: ignore[arg-type]
    assert got == {"stage": "train", "step": 7, "total": None, "percent": 7.0, "loss": None}
    assert progress_of(None) is None


def test_an_attempt_whose_stage_events_never_arrived_shows_its_cached_stages(
    corral_home,
) -> None:
    store = Store.open()
    try:
        rid = make(store)
        store.create_attempt(rid, 1, provider="p", offer={}, price_per_hour=0.0)
        stages = [
            {"name": "train", "state": "running", "started_at": "2026-11-25T10:00:00.500Z"},
            {"name": "eval", "state": "pending", "started_at": None},
        ]
        store.update_attempt(rid, 1, data={"status": {"stages": stages}})
        [attempt] = run_charts.run_timeline(rid, store=store).attempts
    finally:
        store.close()
    [train] = attempt.stages
    assert (train.name, train.state, train.finished_at) == ("train", "running", None)
    assert train.started_at == datetime(2026, 11, 25, 10, 0, 0, 500000, tzinfo=UTC).timestamp()


def test_a_live_attempt_costs_what_it_has_accrued_on_the_chart_and_its_row(corral_home) -> None:
    t = [datetime(2026, 1, 1, 10, 0, tzinfo=UTC)]
    store = Store.open(clock=lambda: t[0])
    try:
        rid = make(store)
        store.create_attempt(rid, 1, provider="p", offer={}, price_per_hour=3.6)
        store.update_attempt(rid, 1, started_at=t[0])
        now = datetime(2026, 1, 1, 10, 30, tzinfo=UTC)
        cost = run_charts.run_charts(rid, store=store, now=now).cost
        [attempt] = run_charts.run_timeline(rid, store=store, now=now).attempts
    finally:
        store.close()
    start = datetime(2026, 1, 1, 10, 0, tzinfo=UTC).timestamp()
    assert cost.points == [(start, 0.0), (start + 1800, 1.8)]
    assert attempt.cost_usd == 1.8


def test_a_stopped_attempt_draws_its_stage_stopped_and_no_stage_that_never_ran(
    corral_home,
) -> None:
    store = Store.open()
    try:
        rid = make(store)
        store.create_attempt(rid, 1, provider="fake", offer={}, price_per_hour=1.0)
        store.add_event(rid, "stage.started", data={"stage": "train"}, attempt=1)
        store.add_event(  # the job saved and exited 75 when asked to stop
            rid, "stage.finished", data={"stage": "train", "state": "preempted"}, attempt=1
        )
        store.add_event(  # the next stage never started: the agent cancels it
            rid, "stage.finished", data={"stage": "eval", "state": "cancelled"}, attempt=1
        )
        outcome = {"kind": "stopped", "reason": "stopped by the user", "cause": "user"}
        store.update_attempt(rid, 1, data={"outcome": outcome}, ended_at=datetime.now(UTC))
        [attempt] = run_charts.run_timeline(rid, store=store).attempts
    finally:
        store.close()
    assert attempt.outcome == "stopped"
    assert [(s.name, s.state) for s in attempt.stages] == [("train", "stopped")]


def test_a_preempted_attempt_draws_no_stage_that_never_ran(corral_home) -> None:
    store = Store.open()
    try:
        rid = make(store)
        store.create_attempt(rid, 1, provider="fake", offer={}, price_per_hour=1.0)
        store.add_event(
            rid, "stage.finished", data={"stage": "train", "state": "cancelled"}, attempt=1
        )
        outcome = {"kind": "preempted", "reason": "the cloud took the machine back"}
        store.update_attempt(rid, 1, data={"outcome": outcome}, ended_at=datetime.now(UTC))
        [attempt] = run_charts.run_timeline(rid, store=store).attempts
    finally:
        store.close()
    assert attempt.outcome == "preempted" and attempt.stages == []


def test_metric_reports_that_waited_for_an_event_are_drawn_at_their_own_step(corral_home) -> None:
    store = Store.open()
    try:
        rid = make(store)
        progress(store, rid, 1, loss=2.0)
        points = [[4, {"val_acc": 0.4}], [6, {"eval_f1": 0.5, "val_loss": 1.9}], ["x", {}], 7]
        progress(store, rid, 11, loss=1.0, points=points)
        progress(store, rid, 12, loss=0.9, metrics={}, points=[[12, {"val_acc": 0.6}]])
        charts = run_charts.run_charts(rid, store=store)
    finally:
        store.close()
    assert {s.name: s.points for s in charts.validation} == {
        "val_acc": [(4.0, 0.4), (12.0, 0.6)],
        "eval_f1": [(6.0, 0.5)],
    }
    assert {s.name: s.points for s in charts.loss}["val_loss"] == [(6.0, 1.9)]


def test_the_table_says_a_verdict_in_a_word_and_why_it_is_not_accepted() -> None:
    failed = {"metric": "cer", "op": "<=", "value": 0.03, "observed": 0.05, "passed": False}
    missing = {"metric": "wer", "op": "<=", "value": 0.1, "observed": None, "passed": False,
               "note": "metric 'wer' is not in the report"}  # fmt: skip
    passed = {"metric": "acc", "op": ">=", "value": 0.9, "observed": 0.95, "passed": True}
    rejected = {"status": "ok", "all_pass": False, "criteria": [failed, missing, passed]}
    assert verdict_of(rejected) == Verdict(
        word="rejected", why="cer = 0.05 (needs <= 0.03); metric 'wer' is not in the report"
    )
    accepted = {"status": "ok", "all_pass": True, "criteria": [passed]}
    assert verdict_of(accepted) == Verdict(word="accepted", why="")
    not_run = {"status": "not_run", "all_pass": False, "error": "the attempt stopped before"}
    assert verdict_of(not_run) == Verdict(word="not evaluated", why="the attempt stopped before")
    no_report = {"status": "missing", "all_pass": False, "error": "no report.json"}
    assert verdict_of(no_report) == Verdict(word="rejected", why="no report.json")
    assert verdict_of(None) is None
