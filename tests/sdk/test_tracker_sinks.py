"""W&B (offline) and MLflow (sqlite) sinks, read back from what they wrote."""

from __future__ import annotations

import json
import os
import signal

import pytest

from corral.sdk import MlflowTracker, WandbTracker, report, signals
from corral.sdk import trackers as trackers_mod

from .wandb_reader import history, run_ids, wait_until_written

pytestmark = pytest.mark.slow


def test_wandb_offline_logs_metrics_and_tables_and_resumes_the_same_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("CORRAL_RUN_ID", "r-abc:1")  # ':' is not allowed in W&B ids
    monkeypatch.setenv("CORRAL_CHECKPOINT_DIR", str(tmp_path / "run" / "checkpoints"))

    first = WandbTracker(project="corral-test", mode="offline")
    assert first.run_id == "r-abc-1"
    first.log({"loss": 1.5, "lr": 0.1}, step=1)
    first.log({"loss": 1.25}, step=2)
    first.log_table("worst", [{"id": "s1", "loss": 3.0}, {"id": "s2", "loss": 2.0}], step=2)
    first.finish()

    # The next attempt. (Its own dir: offline run folders are named by the second they start.)
    second = WandbTracker(project="corral-test", mode="offline", dir=tmp_path / "attempt-2")
    second.log({"loss": 1.0}, step=3)
    second.finish()

    runs = [
        *(tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"),
        *(tmp_path / "attempt-2" / "wandb").glob("offline-run-*/run-*.wandb"),
    ]
    assert len(runs) == 2
    for path in runs:
        wait_until_written(path)
    assert [run_ids(p) for p in runs] == [["r-abc-1"], ["r-abc-1"]]
    rows = history(runs[0])
    # one row per call; the training step is the metric global_step (every chart's x-axis)
    assert [(r["global_step"], r.get("loss")) for r in rows] == [(1, 1.5), (2, 1.25), (2, None)]
    assert rows[0]["lr"] == 0.1
    assert rows[2]["worst/_type"] == "table-file" and rows[2]["worst/nrows"] == 2
    table_file = next((runs[0].parent / "files" / "media" / "table").glob("worst_*.json"))
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["id", "loss"]
    assert table["data"] == [["s1", 3.0], ["s2", 2.0]]
    assert [(r["global_step"], r["loss"]) for r in history(runs[1])] == [(3, 1.0)]


def test_mlflow_sqlite_logs_metrics_and_tables_and_resumes_the_same_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("CORRAL_RUN_ID", "r-42")

    first = MlflowTracker(uri, experiment="exp")
    first.log({"loss": 2.0, "note": "text is skipped"}, step=1)
    first.log_table("worst", [{"id": "a", "loss": 9.5}], step=1)
    first.finish()
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(first.run_id).info.status == "FINISHED"

    # the next attempt, configured the way the agent does it: CORRAL_TRACKERS + report()
    spec = [{"type": "mlflow", "tracking_uri": uri, "project": "exp"}]
    monkeypatch.setenv("CORRAL_TRACKERS", json.dumps(spec))
    trackers_mod.finish()
    report(2, total=10, loss=1.5, acc=0.5)
    (second,) = trackers_mod.default_tracker().trackers[1:]
    assert second.run_id == first.run_id
    assert client.get_run(first.run_id).info.status == "RUNNING"  # resumed
    signals.install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)  # preempted: the run ends as KILLED, not FINISHED
    trackers_mod.finish()

    run = client.get_run(first.run_id)
    assert run.info.run_name == "r-42"
    assert run.data.tags["corral.run_id"] == "r-42"
    assert run.info.status == "KILLED"
    losses = [(m.step, m.value) for m in client.get_metric_history(first.run_id, "loss")]
    assert sorted(losses) == [(1, 2.0), (2, 1.5)]
    assert [(m.step, m.value) for m in client.get_metric_history(first.run_id, "acc")] == [(2, 0.5)]
    assert "note" not in run.data.metrics
    local = client.download_artifacts(first.run_id, "tables/worst/step-1.json", str(tmp_path))
    with open(local) as f:
        doc = json.load(f)
    assert doc["columns"] == ["id", "loss"] and doc["rows"] == [{"id": "a", "loss": 9.5}]
    assert (tmp_path / "mlartifacts").is_dir()  # artifacts next to the sqlite file


@pytest.mark.parametrize("run_id", ["it's-7", 'say "hi"', """both'and"quotes"""])
def test_mlflow_resumes_the_same_run_when_the_run_id_has_quotes(tmp_path, run_id):
    pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowTracker(uri, experiment="exp", run_id="its-7").finish()  # a near miss for LIKE
    first = MlflowTracker(uri, experiment="exp", run_id=run_id)
    first.finish()
    second = MlflowTracker(uri, experiment="exp", run_id=run_id)
    assert second.run_id == first.run_id
    second.finish()
    from mlflow import MlflowClient

    tags = MlflowClient(tracking_uri=uri).get_run(first.run_id).data.tags
    assert tags["corral.run_id"] == run_id  # its own run, not the near miss
