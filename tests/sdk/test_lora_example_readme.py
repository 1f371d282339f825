"""examples/lora-finetune as its README has a user run it: a bad setting is one line and exit 2
(not a traceback), the README's commands one after the other in the same folder do not crash on
a checkpoint of another adapter shape, and running a finished run again trains no extra step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lora-finetune"
TINY = ["--set", "steps=2", "--set", "save_steps=2", "--set", "seq_len=16", "--set", "batch_size=2"]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    target = tmp_path / "lora"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("out", "corral-run"))
    return target


def run(workdir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "WANDB_"))}
    env.update({"HF_HUB_OFFLINE": "1", "CORRAL_PROGRESS_FILE": str(workdir / "progress.jsonl")})
    return subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--set", "stepz=3"], "unknown config key 'stepz' (did you mean 'steps'?)"),
        (["--experiment", "nope"], "experiment 'nope' not found"),
        (["--set", "data=missing.txt"], "pre-flight failed: dataset"),
    ],
)
def test_a_bad_setting_is_one_clear_line_and_exit_code_2(workdir, args, shown):
    result = run(workdir, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"lora-finetune: {shown}" in result.stderr


def fake_checkpoint(workdir: Path, step: int, config: dict) -> Path:
    """A complete HF checkpoint as far as resuming is concerned (its trainer_state.json parses)
    with the resolved config the callback writes into it."""
    ckpt = workdir / "out" / "checkpoints" / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    (ckpt / "corral_config.json").write_text(json.dumps(config))
    return ckpt


def test_a_checkpoint_of_another_adapter_shape_is_refused_with_a_clear_message(workdir):
    # `python train.py` (r=8), then the README's next line `--set lora.r=16`, in the same folder
    config = {
        "seed": 0,
        "model": {"hidden_size": 64, "layers": 2, "heads": 4},
        "lora": {"r": 8, "targets": ["q_proj", "v_proj"], "train_head": True},
    }
    fake_checkpoint(workdir, 60, config)
    result = run(workdir, "--set", "steps=200", "--set", "lora.r=16")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "lora.r=8 (now 16)" in result.stderr
    assert "output_dir" in result.stderr  # how to get out of it


@pytest.mark.slow
def test_running_a_finished_run_again_trains_no_extra_step(workdir):
    first = run(workdir, *TINY)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "done: 2 steps" in first.stdout
    adapter = (workdir / "out" / "adapter" / "adapter_model.safetensors").read_bytes()

    again = run(workdir, *TINY)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "done: 2 steps" in again.stdout, again.stdout
    assert sorted(p.name for p in (workdir / "out" / "checkpoints").iterdir()) == ["checkpoint-2"]
    assert (workdir / "out" / "adapter" / "adapter_model.safetensors").read_bytes() == adapter
