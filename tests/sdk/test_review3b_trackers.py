"""Tracker edge cases found in review: W&B and steps that go back (a resumed attempt) or keys
that are not strings, MLflow metric names it refuses, more metrics than one MLflow batch."""

from __future__ import annotations

import logging

import pytest

from corral.sdk.trackers import MlflowTracker, WandbTracker
from corral.sdk.trackers.mlflow_sink import metric_name

from .wandb_reader import history, wait_until_written


@pytest.mark.slow
def test_wandb_keeps_what_a_resumed_attempt_logs_below_the_last_step(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = WandbTracker(project="corral-test", mode="offline", run_id="r-back", dir=tmp_path)
    tracker.log({"loss": 1.0}, step=730)  # the attempt that was preempted got this far
    tracker.log({"loss": 2.0, 3: 0.5}, step=501)  # the next one resumes from step 500
    tracker.log({"loss": np.float32(0.25), "nan": float("nan")}, step=502)
    tracker.finish()
    (path,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    wait_until_written(path)
    rows = history(path)
    assert [(r["global_step"], r["loss"]) for r in rows] == [(730, 1), (501, 2), (502, 0.25)]
    assert rows[1]["3"] == 0.5  # a non-string key is logged as text, not the whole row lost


def test_metric_names_mlflow_refuses_are_made_valid():
    assert metric_name("val/cer") == "val/cer"
    assert metric_name("eval loss: top-1.5") == "eval loss: top-1.5"
    assert metric_name("val cer (%)") == "val cer ___"
    assert metric_name("acc@1") == "acc_1"
    assert metric_name("a" * 300) == "a" * 250
    assert metric_name("train//loss") == "train__loss"
    assert metric_name("/loss") == "_loss"
    assert metric_name("./x") == "__x"
    assert metric_name("..") == "__"
    assert metric_name("") == "_"
    assert metric_name("wer_é") == "wer_é"


@pytest.mark.slow
def test_mlflow_logs_the_good_metrics_of_a_batch_with_a_bad_name(tmp_path, caplog):
    pytest.importorskip("mlflow")
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", run_id="r-names")
    with caplog.at_level(logging.WARNING, logger="corral.sdk.trackers"):
        tracker.log({"acc@1": 0.5, "loss": 1.0, 7: 2.0}, step=1)
        tracker.log({"acc@1": 0.75}, step=2)
        tracker.log({f"m{i}": float(i) for i in range(2500)}, step=3)  # > one batch of 1000
    metrics = tracker.client.get_run(tracker.run_id).data.metrics
    assert metrics["loss"] == 1.0 and metrics["7"] == 2.0 and metrics["acc_1"] == 0.75
    assert metrics["m0"] == 0.0 and metrics["m2499"] == 2499.0
    renamed = [r.getMessage() for r in caplog.records if "acc@1" in r.getMessage()]
    assert len(renamed) == 1  # said once, not at every step
    tracker.finish()
