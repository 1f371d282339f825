"""The quickstart example, run directly with python: training, checkpoints, resume, evaluation."""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.spec import load_spec
from corral.wire.env import EXIT_PREEMPTED

from .helpers import QUICKSTART, quickstart_env, run_script

pytest.importorskip("torch")
pytest.importorskip("safetensors")


TRAIN = QUICKSTART / "train.py"
EVALUATE = QUICKSTART / "evaluate.py"


def _steps(ckpt_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in ckpt_dir.glob("ckpt-*") if p.is_dir())


def _manifest(ckpt_dir: Path, step: int) -> dict:
    return json.loads((ckpt_dir / f"ckpt-{step}" / "COMPLETE").read_text())


def _progress_steps(path: Path) -> list[int]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["step"] for r in records if r["kind"] == "progress"]


def _weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


#: One straight training run shared by the tests below (each copies what it changes).
STEPS, EVAL_EVERY = 400, 25


@dataclass(frozen=True)
class Trained:
    dir: Path  # the working directory: out/model/ is there
    env: dict[str, str]

    @property
    def checkpoints(self) -> Path:
        return Path(self.env["CORRAL_CHECKPOINT_DIR"])

    @property
    def progress(self) -> Path:
        return Path(self.env["CORRAL_PROGRESS_FILE"])

    def copy_to(self, dest: Path) -> Trained:
        """A copy of this run (workdir and checkpoints) under ``dest``."""
        shutil.copytree(self.dir, dest / "work")
        shutil.copytree(self.checkpoints.parent, dest / "run")
        return Trained(dest / "work", quickstart_env(dest) | _steps_env(STEPS))


def _steps_env(steps: int) -> dict[str, str]:
    return {"QUICKSTART_STEPS": str(steps), "QUICKSTART_EVAL_EVERY": str(EVAL_EVERY)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    base = tmp_path_factory.mktemp("quickstart")
    run = Trained(base / "work", quickstart_env(base) | _steps_env(STEPS))
    run.dir.mkdir()
    result = run_script(TRAIN, cwd=run.dir, env=run.env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "quickstart: loading corpus"
    assert "resumed" not in result.stdout
    return run


@pytest.mark.slow
@pytest.mark.torch
def test_train_saves_retained_checkpoints_progress_and_the_model(trained: Trained) -> None:
    kept = _steps(trained.checkpoints)
    # saved every 25 steps; retention keeps the newest 2 plus the best 1 by val_loss
    assert kept[-2:] == [STEPS - EVAL_EVERY, STEPS] and len(kept) <= 3
    assert all(s % EVAL_EVERY == 0 for s in kept)
    losses = {s: _manifest(trained.checkpoints, s)["metrics"]["val_loss"] for s in kept}
    assert min(losses.values()) < 3.5  # it learned something beyond uniform (ln 103 = 4.6)
    model_dir = trained.dir / "out" / "model"
    assert (model_dir / "model.safetensors").is_file()
    meta = json.loads((model_dir / "config.json").read_text())
    assert meta["gpt"]["n_embd"] == 32 and meta["gpt"]["n_layer"] == 1
    steps = _progress_steps(trained.progress)
    assert steps == sorted(steps) and steps[-1] == STEPS
    saved = json.loads((trained.checkpoints.parent / "config.json").read_text())
    assert saved["steps"] == STEPS and saved["n_embd"] == 32


@pytest.mark.slow
@pytest.mark.torch
def test_a_second_run_with_more_steps_resumes_from_the_last_step(
    trained: Trained, tmp_path: Path
) -> None:
    run = trained.copy_to(tmp_path)
    before = len(_progress_steps(run.progress))
    more = STEPS + 10
    result = run_script(TRAIN, cwd=run.dir, env=run.env | {"QUICKSTART_STEPS": str(more)})
    assert result.returncode == 0, result.stderr
    assert f"quickstart: resumed from step {STEPS}" in result.stdout
    evaluated = [int(m) for m in re.findall(rf"^step (\d+)/{more} ", result.stdout, re.M)]
    assert evaluated == [more]  # no step before 400 was trained again
    new_steps = _progress_steps(run.progress)[before:]
    assert new_steps and min(new_steps) > STEPS and new_steps[-1] == more
    assert _steps(run.checkpoints)[-2:] == [STEPS, more]


@pytest.mark.slow
@pytest.mark.torch
def test_a_preempted_run_resumes_to_the_same_weights_as_an_uninterrupted_one(
    trained: Trained, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = quickstart_env(tmp_path) | _steps_env(STEPS) | {"CORRAL_GRACE_SECONDS": "30"}
    proc = subprocess.Popen(
        [sys.executable, str(TRAIN)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the first evaluation: training is under way
            if line.startswith("step "):
                proc.send_signal(signal.SIGTERM)
                break
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err
    stopped_at = _steps(Path(env["CORRAL_CHECKPOINT_DIR"]))[-1]
    assert EVAL_EVERY <= stopped_at < STEPS
    assert not (work / "out" / "model").exists()

    resumed = run_script(TRAIN, cwd=work, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"quickstart: resumed from step {stopped_at}" in resumed.stdout

    straight = _weights(trained.dir / "out" / "model")
    after_preemption = _weights(work / "out" / "model")
    assert straight.keys() == after_preemption.keys()
    assert all(bool((straight[k] == after_preemption[k]).all()) for k in straight)


@pytest.mark.slow
@pytest.mark.torch
def test_evaluate_writes_the_report_from_the_model_or_the_best_checkpoint(
    trained: Trained, tmp_path: Path
) -> None:
    args = ("--sample-chars", "100", "--generate", "20", "--threads", "1")
    report_path = tmp_path / "eval_report.json"
    result = run_script(
        EVALUATE, *args, "--report", str(report_path), cwd=trained.dir, env=trained.env
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(report_path.read_text())
    assert {"val_loss", "perplexity", "next_char_cer", "next_char_accuracy", "sample"} <= set(
        report
    )
    assert 0 < report["val_loss"] < 3.5
    assert report["perplexity"] == pytest.approx(math.exp(report["val_loss"]), rel=1e-3)
    assert 0 <= report["next_char_cer"] < 1 and 0 < report["next_char_accuracy"] <= 1
    assert report["sample"].startswith("The ") and len(report["sample"]) == 4 + 20
    assert report["cer_chars"] == 100
    assert report["model"] == "out/model"

    by_loss = {
        s: _manifest(trained.checkpoints, s)["metrics"]["val_loss"]
        for s in _steps(trained.checkpoints)
    }
    best = min(by_loss, key=lambda s: (by_loss[s], -s))
    from_ckpt_path = tmp_path / "from_ckpt.json"
    result = run_script(
        EVALUATE,
        *args,
        "--from-checkpoint",
        "--report",
        str(from_ckpt_path),
        cwd=trained.dir,
        env=trained.env,
    )
    assert result.returncode == 0, result.stderr
    from_ckpt = json.loads(from_ckpt_path.read_text())
    assert Path(from_ckpt["model"]).name == f"ckpt-{best}"
    if best == STEPS:  # the best is the final model: same weights, same numbers
        assert from_ckpt["val_loss"] == report["val_loss"]


@pytest.mark.slow
@pytest.mark.torch
def test_evaluate_without_a_model_or_checkpoint_says_to_train_first(tmp_path: Path) -> None:
    result = run_script(EVALUATE, "--threads", "1", cwd=tmp_path, env=quickstart_env(tmp_path))
    assert result.returncode != 0
    assert "run train.py first" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.torch
def test_train_rejects_a_misspelt_setting_in_one_line(tmp_path: Path) -> None:
    env = quickstart_env(tmp_path) | {"QUICKSTART_STPES": "5"}
    result = run_script(TRAIN, cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "unknown setting QUICKSTART_STPES (did you mean QUICKSTART_STEPS?)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not Path(env["CORRAL_CHECKPOINT_DIR"]).exists()


@pytest.mark.slow
@pytest.mark.torch
def test_resume_refuses_a_checkpoint_of_another_model_shape(
    trained: Trained, tmp_path: Path
) -> None:
    run = trained.copy_to(tmp_path)
    result = run_script(TRAIN, "--set", "n_embd=16", cwd=run.dir, env=run.env)
    assert result.returncode != 0
    assert "n_embd=32 (now 16)" in result.stderr
    assert "Traceback" not in result.stderr


def test_quickstart_spec_trains_then_evaluates_on_the_cpu() -> None:
    spec = load_spec(QUICKSTART / "corral.yaml", overrides=["env.QUICKSTART_STEPS=20"])
    assert spec.name == "quickstart"
    assert [s.name for s in spec.stages] == ["train", "evaluate"]
    assert spec.stages[1].needs == ["train"]
    assert spec.resources.gpus.max == 0 and all(s.gpus == 0 for s in spec.stages)
    assert spec.env["QUICKSTART_STEPS"] == "20"
    cp = spec.checkpoints
    assert (cp.keep_last, cp.keep_best, cp.metric, cp.mode) == (2, 1, "val_loss", "min")
    assert str(spec.eval.report) == "out/eval_report.json"
    for stage in spec.stages:  # each stage runs a script of the example
        script = stage.run.split()[1]
        assert (QUICKSTART / script).is_file()


def test_default_steps_match_between_the_spec_and_the_script() -> None:
    spec = load_spec(QUICKSTART / "corral.yaml")
    source = (QUICKSTART / "train.py").read_text()
    default = re.search(r"^\s+steps: int = (\d+)", source, re.M)
    assert default is not None
    assert spec.env["QUICKSTART_STEPS"] == default.group(1)
    for field in ("keep_last", "keep_best"):  # the script applies the spec's retention policy
        found = re.search(rf"^\s+{field}: int = (\d+)", source, re.M)
        assert found is not None and int(found.group(1)) == getattr(spec.checkpoints, field)
