from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from corral.errors import BadInput
from corral.sdk import (
    CompositeTracker,
    JsonlTracker,
    NullTracker,
    log,
    make_trackers,
    report,
)
from corral.sdk import trackers as trackers_mod
from corral.sdk.trackers import MlflowTracker, WandbTracker
from corral.sdk.trackers.base import numeric_metrics
from corral.sdk.trackers.mlflow_sink import metric_name

from .recording import RecordingTracker
from .wandb_reader import history, wait_until_written


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_jsonl_writes_metrics_records_to_the_agent_progress_file(tmp_path, monkeypatch):
    progress = tmp_path / "agent" / "main.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    JsonlTracker().log({"loss": 0.5, "lr": 1e-4}, step=3)
    (rec,) = records(progress)
    assert rec["kind"] == "metrics" and rec["step"] == 3
    assert rec["metrics"] == {"loss": 0.5, "lr": 1e-4}
    assert isinstance(rec["ts"], float)


def test_jsonl_falls_back_to_the_local_run_dir_without_an_agent(sdk_sandbox):
    tracker = JsonlTracker()
    tracker.log({"acc": 1.0}, step=1)
    assert tracker.target() == str(sdk_sandbox / "corral-run" / "metrics.jsonl")
    assert records(sdk_sandbox / "corral-run" / "metrics.jsonl")[0]["metrics"] == {"acc": 1.0}


def test_jsonl_explicit_path_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(tmp_path / "agent.jsonl"))
    JsonlTracker(tmp_path / "mine.jsonl").log_table("t", [{"id": 1}], step=2)
    assert records(tmp_path / "mine.jsonl")[0] == {
        "ts": pytest.approx(records(tmp_path / "mine.jsonl")[0]["ts"]),
        "kind": "table",
        "name": "t",
        "step": 2,
        "rows": [{"id": 1}],
    }
    assert not (tmp_path / "agent.jsonl").exists()


def test_report_writes_a_progress_record_and_logs_loss_to_the_extras(tmp_path, monkeypatch):
    progress = tmp_path / "p.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    extra = RecordingTracker()
    trackers_mod.init([extra])
    report(10, total=100, loss=2.5, lr=0.01, cost_usd=0.2)
    (rec,) = records(progress)
    assert rec["kind"] == "progress"
    assert (rec["step"], rec["total"], rec["loss"]) == (10, 100, 2.5)
    assert rec["metrics"] == {"lr": 0.01, "cost_usd": 0.2}
    assert extra.metrics == [({"lr": 0.01, "cost_usd": 0.2, "loss": 2.5}, 10)]


def test_log_goes_to_jsonl_and_every_configured_tracker(tmp_path, monkeypatch):
    progress = tmp_path / "p.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    a, b = RecordingTracker(), RecordingTracker()
    trackers_mod.init([a, b])
    log({"val/cer": 0.1}, step=5)
    assert a.metrics == b.metrics == [({"val/cer": 0.1}, 5)]
    assert records(progress)[0]["metrics"] == {"val/cer": 0.1}


def test_init_replaces_and_finishes_the_previous_extras():
    first = RecordingTracker()
    trackers_mod.init([first])
    second = RecordingTracker()
    trackers_mod.init([second])
    log({"x": 1}, step=1)
    assert first.finished == 1 and first.metrics == []
    assert second.metrics == [({"x": 1}, 1)]


def test_extras_come_from_the_corral_trackers_env_on_first_use(tmp_path, monkeypatch):
    trackers_mod.finish()  # nothing configured: the env is read on the next log
    extra_file = tmp_path / "extra.jsonl"
    monkeypatch.setenv("CORRAL_TRACKERS", json.dumps([{"type": "jsonl", "path": str(extra_file)}]))
    log({"loss": 1.0}, step=1)
    assert records(extra_file)[0]["metrics"] == {"loss": 1.0}
    assert len(trackers_mod.default_tracker().trackers) == 2


def test_a_bad_corral_trackers_env_is_logged_not_raised(monkeypatch, caplog):
    trackers_mod.finish()
    monkeypatch.setenv("CORRAL_TRACKERS", "{not json")
    with caplog.at_level(logging.WARNING, logger="corral.sdk.trackers"):
        log({"loss": 1.0}, step=1)
    assert "CORRAL_TRACKERS is not valid JSON" in caplog.text


def test_a_failing_sink_does_not_stop_the_others(caplog):
    good, bad = RecordingTracker(), RecordingTracker(fail=True)
    composite = CompositeTracker([bad, good])
    with caplog.at_level(logging.WARNING, logger="corral.sdk.trackers"):
        composite.log({"a": 1}, step=1)
        composite.log({"a": 2}, step=2)
        composite.log_table("t", [{"id": 1}], step=2)
    assert good.metrics == [({"a": 1}, 1), ({"a": 2}, 2)]
    assert good.tables == [("t", [{"id": 1}], 2)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "sink down" in warnings[0].getMessage()


def test_make_trackers_of_nothing_is_the_null_tracker():
    tracker = make_trackers([])
    assert isinstance(tracker, NullTracker)
    tracker.log({"a": 1}, step=1)
    tracker.finish()


def test_make_trackers_builds_from_spec_dicts_and_spec_models(tmp_path):
    from corral.spec import Tracker as SpecTracker

    built = make_trackers(
        [{"type": "jsonl", "path": str(tmp_path / "a.jsonl")}, SpecTracker(type="jsonl")]
    )
    assert isinstance(built, CompositeTracker)
    assert [type(t) for t in built.trackers] == [JsonlTracker, JsonlTracker]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "tensorboard"}, "tracker spec 'tensorboard': type"),
        ({"type": "wandb", "projekt": "x"}, "projekt: Extra inputs are not permitted"),
        ({"type": "wandb", "mode": "sometimes"}, "mode"),
        ("wandb", "must be a mapping"),
    ],
)
def test_make_trackers_rejects_bad_specs(spec, message):
    with pytest.raises(BadInput, match=message):
        make_trackers([spec])


def test_numeric_metrics_keeps_numbers_and_scalars_only():
    np = pytest.importorskip("numpy")
    got = numeric_metrics({"a": 1, "b": np.float32(0.5), "c": "text", "d": True, "e": None})
    assert got == {"a": 1.0, "b": 0.5}


def test_importing_the_sdk_loads_no_torch_wandb_or_mlflow():
    code = (
        "import sys\n"
        "import corral.sdk as sdk\n"
        "for name in ('log', 'report', 'make_trackers', 'cer', 'EarlyStopping', 'HighLossLogger',"
        " 'TrainingConfig', 'preflight', 'retry'):\n"
        "    getattr(sdk, name)\n"
        "import corral.sdk.integrations\n"
        "sdk.log({'a': 1}, 1)\n"
        "bad = [m for m in ('torch', 'wandb', 'mlflow', 'transformers', 'jiwer') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_checkpoint_records_carry_the_checkpoint_path(tmp_path, monkeypatch):
    progress = tmp_path / "p.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    trackers_mod.checkpoint(12, "/ckpt/checkpoint-12", {"eval_loss": float("nan"), "acc": 0.5})
    (rec,) = records(progress)
    assert rec["kind"] == "checkpoint" and rec["step"] == 12
    assert rec["path"] == "/ckpt/checkpoint-12"
    assert rec["metrics"] == {"eval_loss": "nan", "acc": 0.5}  # JSON has no NaN: a string


def test_progress_writes_only_the_progress_record(tmp_path, monkeypatch):
    progress = tmp_path / "p.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    extra = RecordingTracker()
    trackers_mod.init([extra])
    trackers_mod.progress(3, total=9, cost_usd=0.5)
    (rec,) = records(progress)
    assert (rec["kind"], rec["step"], rec["total"]) == ("progress", 3, 9)
    assert rec["metrics"] == {"cost_usd": 0.5} and "loss" not in rec
    assert extra.metrics == []


def test_init_builds_extras_from_specs(tmp_path):
    target = tmp_path / "from-spec.jsonl"
    whole = trackers_mod.init(specs=[{"type": "jsonl", "path": str(target)}])
    assert [type(t) for t in whole.trackers] == [JsonlTracker, JsonlTracker]
    log({"loss": 0.25}, step=4)
    assert records(target)[0]["metrics"] == {"loss": 0.25}
    with pytest.raises(BadInput, match="tensorboard"):
        trackers_mod.init(specs=[{"type": "tensorboard"}])
    log({"loss": 0.5}, step=5)  # the set configured before is still in use
    assert [r["step"] for r in records(target)] == [4, 5]


def test_a_metrics_dict_that_contains_itself_is_written_not_raised(tmp_path):
    """Writing progress never raises into the training loop."""
    import json

    from corral.sdk import progress_file

    metrics: dict = {"loss": 0.5}
    metrics["self"] = metrics
    target = tmp_path / "progress.jsonl"
    assert progress_file.emit("metrics", file=str(target), step=1, metrics=metrics)
    record = json.loads(target.read_text())
    assert record["metrics"]["loss"] == 0.5 and record["step"] == 1


# Tracker edge cases found in review: W&B and steps that go back (a resumed attempt) or keys that
# are not strings, MLflow metric names it refuses, more metrics than one MLflow batch.


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
