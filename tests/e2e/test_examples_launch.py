"""The examples, end to end through `corral launch`: CLI, store, controller, local provider,
agent, SDK. Each test works on a copy of the example, so the repository stays clean."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.store import Store
from examples.helpers import TINY

pytestmark = [pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(
        EXAMPLES / name, dst, ignore=shutil.ignore_patterns("out", "corral-run", "checkpoints")
    )
    return dst


@pytest.mark.torch
def test_quickstart_trains_evaluates_and_keeps_checkpoints(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    example = _copy("quickstart", tmp_path)
    # the shipped spec and scripts as they are, with the tests' tiny model (a few CPU seconds
    # instead of ~40 for the default size: what is checked here is the path through corral)
    tiny = [f"env.{key}={value}" for key, value in TINY.items()]
    result = runner.invoke(
        app,
        [
            "launch",
            str(example / "corral.yaml"),
            *[arg for kv in tiny for arg in ("--set", kv)],
            "--set",
            "env.QUICKSTART_STEPS=30",
            "--wait",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr + result.stdout
    run = json.loads(result.stdout)
    assert run["state"] == "SUCCEEDED"
    assert run["completed_stages"] == ["train", "evaluate"]

    report = json.loads((example / "out" / "eval_report.json").read_text())
    assert report["val_loss"] > 0 and report["perplexity"] > 1
    home = Path(os.environ["CORRAL_HOME"])
    checkpoints = sorted(
        p.name
        for p in (home / "runs" / run["id"] / "checkpoints").iterdir()
        if p.name.startswith("ckpt-")
    )
    assert checkpoints, "the SDK wrote checkpoints into CORRAL_CHECKPOINT_DIR"
    logs = runner.invoke(app, ["logs", run["id"]]).stdout
    assert "quickstart: done at step 30" in logs
    events = Store.open().events(run["id"])
    types = [e.type for e in events]
    assert "checkpoint.saved" in types and "progress" in types
    assert (
        types.index("run.started") < types.index("checkpoint.saved") < types.index("run.finished")
    )


def test_pipeline_runs_parallel_stages_on_disjoint_gpus(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:8")
    example = _copy("pipeline", tmp_path)
    result = runner.invoke(app, ["launch", str(example / "corral.yaml"), "--wait", "--json"])
    assert result.exit_code == 0, result.stderr + result.stdout
    run = json.loads(result.stdout)
    assert run["state"] == "SUCCEEDED"
    logs = runner.invoke(app, ["logs", run["id"]]).stdout
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in logs.replace("'", "")
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in logs.replace("'", "")
    events = Store.open().events(run["id"], types=["stage.started", "stage.finished"])
    started = {e.data["stage"]: e.data["agent_ts"] for e in events if e.type == "stage.started"}
    finished = {e.data["stage"]: e.data["agent_ts"] for e in events if e.type == "stage.finished"}
    # detection, recognition and lm overlap in time; evaluate starts after all three ended
    first_three = ["detection", "recognition", "lm"]
    assert max(started[s] for s in first_three) < min(finished[s] for s in first_three)
    assert started["evaluate"] >= max(finished[s] for s in first_three)


def test_status_shows_the_acceptance_verdict_and_the_manifest(tmp_path: Path) -> None:
    work = tmp_path / "job"
    work.mkdir()
    (work / "report.json.in").write_text('{"cer": 0.02, "latency_ms": 250}')
    (work / "corral.yaml").write_text(
        "name: judged\n"
        "run: cp report.json.in report.json\n"
        "eval:\n  report: report.json\n  acceptance: ['cer <= 0.03', 'latency_ms <= 200']\n"
    )
    result = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    run = json.loads(result.stdout)
    assert run["state"] == "SUCCEEDED"  # fail_run_on_reject is off by default
    status = json.loads(runner.invoke(app, ["status", run["id"], "--json"]).stdout)
    acc = status["acceptance"]
    assert acc["all_pass"] is False
    assert [(c["metric"], c["passed"]) for c in acc["criteria"]] == [
        ("cer", True),
        ("latency_ms", False),
    ]
    assert status["manifest"]["path"].endswith("manifest.json")
    human = runner.invoke(app, ["status", run["id"]]).stdout
    assert "acceptance" in human and "fail" in human
    # launch's own closing summary says it too: SUCCEEDED alone would read as "all good"
    launched = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait"])
    assert "SUCCEEDED" in launched.stdout
    assert "acceptance" in launched.stdout and "fail" in launched.stdout
    assert "latency_ms <= 200 (250" in launched.stdout
