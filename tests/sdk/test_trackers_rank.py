"""In distributed training the module-level log/report/progress act on rank 0 only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.sdk import log, report
from corral.sdk import trackers as trackers_mod

from .recording import RecordingTracker


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(("env", "writes"), [
    ({}, True),
    ({"RANK": "0", "LOCAL_RANK": "0"}, True),
    ({"RANK": "3", "LOCAL_RANK": "1"}, False),
    ({"LOCAL_RANK": "1"}, False),
    ({"RANK": "0", "LOCAL_RANK": "1"}, True),  # rank 0 of the job on its second GPU? RANK wins
])  # fmt: skip
def test_only_rank_zero_writes_progress_and_metrics(tmp_path, monkeypatch, env, writes):
    progress = tmp_path / "p.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    extra = RecordingTracker()
    trackers_mod.init([extra])
    report(5, total=10, loss=0.5, lr=1e-3)
    log({"val_loss": 0.4}, 5)
    trackers_mod.progress(6, total=10)
    trackers_mod.log_table("worst", [{"id": "a", "loss": 2.0}], 5)
    kinds = [r["kind"] for r in lines(progress)]
    if writes:
        assert kinds == ["progress", "metrics", "progress", "table"]
        assert extra.metrics and extra.tables  # the extras got them too
    else:
        assert kinds == [] and not extra.metrics and not extra.tables


def test_a_non_zero_rank_builds_no_tracker_from_the_spec(tmp_path, monkeypatch):
    """The spec's W&B tracker would otherwise start on every rank with the same run id."""
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(tmp_path / "p.jsonl"))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv(
        "CORRAL_TRACKERS", json.dumps([{"type": "jsonl", "path": str(tmp_path / "x")}])
    )
    trackers_mod.finish()
    report(1, total=2, loss=1.0)
    assert trackers_mod._extras is None and not (tmp_path / "x").exists()
