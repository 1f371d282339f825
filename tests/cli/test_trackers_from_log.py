"""The spec's W&B and MLflow trackers get what a script that never imports corral prints, as
they get the SDK's ``report()``: ``corral launch`` on the local provider, a stage whose
``progress`` preset reads its log (a real HF Trainer run's bar and dicts, nanoGPT's ``iter``
and ``step`` lines), and the trackers' own files read back: W&B's offline run file (its history
rows, ``global_step`` the training step) and MLflow's sqlite store (``MlflowClient``); and
both across a preemption, each keeping one run for the corral run."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from corral.sdk.trackers.wandb_sink import wandb_run_id
from sdk.wandb_reader import history, run_ids, wait_until_written

from .test_debug import cli

pytestmark = pytest.mark.slow

HF_TRAINER = Path(__file__).parents[1] / "support" / "tool_scripts" / "hf_trainer.py"

NANOGPT = textwrap.dedent(
    """
    import time

    print("Overriding: max_iters = 40", flush=True)
    for it in range(0, 41):
        if it % 20 == 0:
            print(f"step {it}: train loss {4.0 - it / 20:.4f}, val loss {4.5 - it / 20:.4f}", flush=True)
        if it % 10 == 0:
            print(f"iter {it}: loss {4.0 - it / 40:.4f}, time 12.50ms, mfu 1.25%", flush=True)
        time.sleep(0.01)
    """
)


def _launch(tmp_path: Path, script: str, spec: str) -> str:
    if script:
        (tmp_path / "train.py").write_text(script)
    (tmp_path / "corral.yaml").write_text(textwrap.dedent(spec).lstrip())
    code, out, err = cli("launch", str(tmp_path / "corral.yaml"), "--wait", "--json")
    assert code == 0, err
    run = json.loads(out)
    assert run["state"] == "SUCCEEDED", run["reason"]
    return str(run["id"])


@pytest.mark.torch
def test_wandb_gets_the_values_an_hf_trainer_log_prints_at_their_steps(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("transformers")
    run_id = _launch(
        tmp_path,
        "",
        f"""
        name: hf-wandb
        run: {sys.executable} {HF_TRAINER} out 30
        progress: hf
        env: {{WANDB_MODE: offline, WANDB_SILENT: "true"}}
        trackers:
          - {{type: wandb, project: corral-test}}
        """,
    )
    home = Path(os.environ["CORRAL_HOME"])
    files = sorted(home.rglob("run-*.wandb"))
    assert len(files) == 1, files
    wait_until_written(files[0])
    assert run_ids(files[0]) == [wandb_run_id(run_id)]  # the corral run's W&B run
    rows = [{k: v for k, v in row.items() if not k.startswith("_")} for row in history(files[0])]
    # what the Trainer printed (logging every 5 steps, evaluating every 15), at its steps
    log = (home / "runs" / run_id / "logs" / "a1" / "main.log").read_text()
    printed = [ast.literal_eval(d) for d in re.findall(r"\{'[^{}]*\}", log)]
    losses = [d for d in printed if "loss" in d]
    evals = [d for d in printed if "eval_loss" in d]
    assert len(losses) == 6 and len(evals) == 2
    loss_rows = [r for r in rows if "loss" in r]
    assert [r["global_step"] for r in loss_rows] == [5, 10, 15, 20, 25, 30]
    assert [r["loss"] for r in loss_rows] == [float(d["loss"]) for d in losses]
    assert all(r["learning_rate"] == 5e-05 for r in loss_rows)
    eval_rows = [r for r in rows if "eval_loss" in r]
    assert [r["global_step"] for r in eval_rows] == [15, 30]
    assert [r["eval_loss"] for r in eval_rows] == [float(d["eval_loss"]) for d in evals]
    assert any(r.get("train_loss") and r["global_step"] == 30 for r in rows)


def test_mlflow_gets_the_values_a_nanogpt_style_log_prints_at_their_steps(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    run_id = _launch(
        tmp_path,
        NANOGPT,
        """
        name: nanogpt-mlflow
        run: python train.py
        progress: nanogpt
        env: {MLFLOW_TRACKING_URI: "sqlite:///mlruns/mlflow.db"}   # the workdir's, as in the job
        trackers:
          - {type: mlflow, project: nano}
        """,
    )
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("nano")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags.get("corral.run_id") == run_id  # the corral run's MLflow run
    assert run.info.status == "FINISHED"  # ended before the attempt did

    def points(name: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))

    assert points("loss") == [(0, 4.0), (10, 3.75), (20, 3.5), (30, 3.25), (40, 3.0)]
    assert points("train_loss") == [(0, 4.0), (20, 3.0), (40, 2.0)]
    assert points("val_loss") == [(0, 4.5), (20, 3.5), (40, 2.5)]
    assert points("mfu") == [(s, 1.25) for s in (0, 10, 20, 30, 40)]
    assert points("time_ms") == [(s, 12.5) for s in (0, 10, 20, 30, 40)]


#: nanoGPT-style, resumable: saves its iteration to out/ckpt.txt every 10 iterations, goes on
#: from the saved one + 1 with --init_from=resume, dies of SIGTERM (it ignores preemption)
RESUMABLE = textwrap.dedent(
    """
    import pathlib, sys, time

    out = pathlib.Path("out")
    out.mkdir(exist_ok=True)
    ckpt = out / "ckpt.txt"
    start = int(ckpt.read_text()) + 1 if "--init_from=resume" in sys.argv else 0
    with open("starts.txt", "a") as f:
        f.write(f"{start}\\n")
    print("Overriding: max_iters = 60", flush=True)
    for it in range(start, 61):
        print(f"iter {it}: loss {4.0 - it / 20:.4f}, time 50.00ms, mfu 1.00%", flush=True)
        if it % 10 == 0 and it > start:
            (out / "ckpt.tmp").write_text(str(it))
            (out / "ckpt.tmp").replace(ckpt)
        time.sleep(0.05)
    """
)


def test_both_trackers_go_on_with_the_same_run_after_a_preemption(tmp_path: Path) -> None:
    """Preempted once (`corral debug preempt`) and resumed at the saved iteration + 1: W&B and
    MLflow each keep one run for the corral run, and every value is at the step it was printed
    at (the steps between the save and the preemption twice, once from each attempt)."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    from support.waiting import wait_until

    from .helpers import wait_state

    (tmp_path / "train.py").write_text(RESUMABLE)
    (tmp_path / "corral.yaml").write_text(
        textwrap.dedent(
            """
            name: resumed
            run: python train.py
            resume_args: --init_from=resume
            progress: nanogpt
            checkpoints: {path: out/ckpt.txt}
            env: {WANDB_MODE: offline, WANDB_SILENT: "true", MLFLOW_TRACKING_URI: "sqlite:///mlflow.db"}
            trackers:
              - {type: wandb, project: corral-test}
              - {type: mlflow, project: resumed}
            """
        ).lstrip()
    )
    code, out, err = cli("launch", str(tmp_path / "corral.yaml"), "--detach", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    ckpt = tmp_path / "out" / "ckpt.txt"
    wait_until(ckpt.exists, 60, 0.05, "the first save")
    code, out, err = cli("debug", "preempt", run_id, "--grace", "20", "--json")
    assert code == 0, err
    run = wait_state(run_id, {"SUCCEEDED", "FAILED"}, timeout=120)
    assert run["state"] == "SUCCEEDED", run["reason"]
    first, second = (int(x) for x in (tmp_path / "starts.txt").read_text().split())
    assert first == 0 and second > 10 and second % 10 == 1  # the saved iteration + 1

    files = sorted(Path(os.environ["CORRAL_HOME"]).rglob("run-*.wandb"))
    assert len(files) == 2, files  # one offline run folder per attempt, one W&B run id
    steps = []
    for path in files:
        wait_until_written(path)
        assert run_ids(path) == [wandb_run_id(run_id)]
        rows = history(path)
        assert all(r["loss"] == round(4.0 - r["global_step"] / 20, 4) for r in rows)
        steps.append([r["global_step"] for r in rows])
    assert steps[0] == list(range(steps[0][-1] + 1)) and steps[0][-1] >= second - 1
    assert steps[1] == list(range(second, 61))

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("resumed")
    assert experiment is not None
    (mlrun,) = client.search_runs([experiment.experiment_id])  # resumed, not a second run
    assert mlrun.data.tags.get("corral.run_id") == run_id
    assert mlrun.info.status == "FINISHED"
    points = sorted((m.step, m.value) for m in client.get_metric_history(mlrun.info.run_id, "loss"))
    assert points == sorted((s, round(4.0 - s / 20, 4)) for s in steps[0] + steps[1])
