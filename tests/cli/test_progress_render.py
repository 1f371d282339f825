"""Review: how `corral status` and the `corral logs -f` status line show a stage's progress
when its loss diverged ("nan", "inf", "-inf" from the agent) or is missing."""

from __future__ import annotations

from types import SimpleNamespace

from corral.cli.follow import _status_line
from corral.cli.status import fmt_loss, fmt_progress


def _run():
    return SimpleNamespace(
        id="r-1",
        state="RUNNING",
        attempt=1,
        cost_usd=0.0,
        reason="",
        created_at=None,
        started_at=None,
        finished_at=None,
    )


def _attempt(progress):
    stage = {"name": "train", "state": "running", "progress": progress}
    return SimpleNamespace(data={"status": {"stages": [stage]}})


def test_a_diverged_loss_is_shown_as_such_and_no_loss_as_a_dash():
    assert fmt_loss("nan") == "nan"
    assert fmt_loss("-inf") == "-inf"
    assert fmt_loss(None) == "-"
    assert fmt_loss(2.34567) == "2.346"
    assert fmt_loss("something else") == "-"
    assert fmt_loss(True) == "-"


def test_progress_text_with_and_without_total():
    assert fmt_progress({"step": 5, "total": 20, "percent": 25.0}) == "5/20 (25%)"
    assert fmt_progress({"step": 5, "total": None, "percent": None}) == "5"
    assert fmt_progress({"step": 5, "total": 0, "percent": None}) == "5"
    assert fmt_progress({"step": 5, "total": 20, "percent": 25.0, "eta_s": 725.0}) == (
        "5/20 (25%) ETA 12m05s"
    )
    assert fmt_progress({"step": 5, "total": 20, "percent": 25.0, "eta_s": None}) == "5/20 (25%)"
    assert fmt_progress({"step": 20, "total": 20, "percent": 100.0, "eta_s": 0.0}) == "20/20 (100%)"
    assert fmt_progress({}) == "-"
    assert fmt_progress(None) == "-"


def test_the_follow_status_line_does_not_crash_on_a_nan_loss(monkeypatch):
    import corral.cli.output as output

    monkeypatch.setattr(output, "run_duration", lambda run: 0.0)
    line = _status_line(_run(), _attempt({"step": 3, "total": 10, "percent": 30.0, "loss": "nan"}))
    assert "train step 3/10 (30%) loss nan" in line
    line = _status_line(_run(), _attempt({"step": 3, "total": None, "percent": None, "loss": 1.5}))
    assert "train step 3 loss 1.5" in line


def test_an_evaluation_that_never_ran_reads_not_run() -> None:
    from corral.cli.status import acceptance_line

    line = acceptance_line(
        {"status": "not_run", "error": "the attempt stopped before writing r.json",
         "criteria": [{"metric": "val_loss", "op": "<=", "value": 3.0, "observed": None}]}
    )  # fmt: skip
    assert line is not None and "not run" in line and "fail" not in line and "None" not in line


def test_a_stage_whose_pattern_read_nothing_says_so_in_one_line():
    from corral.cli.status import unread_line

    stage = {"name": "train", "progress": None}
    unread = {"pattern": "lightning", "lines": 342}
    assert unread_line({**stage, "progress_unread": unread}) == (
        "  progress    train: nothing read from its log by progress 'lightning' (342 lines)"
    )
    one = {**stage, "progress_unread": {"pattern": "regex", "lines": 1}}
    assert (
        unread_line(one) == "  progress    train: nothing read from its log by its regex (1 line)"
    )
    assert unread_line(stage) is None  # no pattern, or it read something
    assert unread_line({**stage, "progress": {"step": 3}, "progress_unread": unread}) is None
