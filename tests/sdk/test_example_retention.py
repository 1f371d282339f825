"""The examples keep the checkpoints the spec's `checkpoints:` says (passed as env variables by
the agent), and their own matching defaults when run directly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY_QUICKSTART = {
    "QUICKSTART_STEPS": "20",
    "QUICKSTART_EVAL_EVERY": "4",
    "QUICKSTART_N_LAYER": "1",
    "QUICKSTART_N_HEAD": "2",
    "QUICKSTART_N_EMBD": "32",
    "QUICKSTART_BLOCK_SIZE": "32",
    "QUICKSTART_BATCH_SIZE": "8",
    "QUICKSTART_EVAL_BATCHES": "2",
    "QUICKSTART_WARMUP_STEPS": "2",
    "QUICKSTART_THREADS": "1",
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CORRAL_CHECKPOINT", "QUICKSTART_", "CORRAL_PROGRESS"))
    }
    return env | extra


def run(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def steps(directory: Path, prefix: str) -> list[int]:
    return sorted(int(p.name.rsplit("-", 1)[1]) for p in directory.glob(f"{prefix}-*"))


def test_quickstart_takes_retention_from_the_environment_and_defaults_to_the_spec(tmp_path):
    script = str(EXAMPLES / "quickstart" / "train.py")
    env = clean_env(**TINY_QUICKSTART)
    run([script], tmp_path, env | {"CORRAL_CHECKPOINT_DIR": str(tmp_path / "direct")})
    kept = steps(tmp_path / "direct", "ckpt")  # direct run: newest 2 + best 1 by val_loss
    assert kept[-2:] == [16, 20] and len(kept) in (2, 3)

    spec_env = {
        "CORRAL_CHECKPOINT_DIR": str(tmp_path / "spec"),
        "CORRAL_CHECKPOINT_KEEP_LAST": "1",
        "CORRAL_CHECKPOINT_KEEP_BEST": "0",
        "CORRAL_CHECKPOINT_MODE": "min",
    }
    run([script], tmp_path, env | spec_env)
    assert steps(tmp_path / "spec", "ckpt") == [20]  # what the spec said, not the script


def test_lora_example_takes_retention_from_the_environment(tmp_path):
    pytest.importorskip("peft")
    pytest.importorskip("transformers")
    workdir = tmp_path / "lora"
    ignore = shutil.ignore_patterns("out", "corral-run")
    shutil.copytree(EXAMPLES / "lora-finetune", workdir, ignore=ignore)
    settings = ["steps=5", "save_steps=1", "seq_len=32", "batch_size=4"]
    env = clean_env(CORRAL_CHECKPOINT_KEEP_LAST="3", HF_HUB_OFFLINE="1")
    run(["train.py", *(f"--set={s}" for s in settings)], workdir, env)
    assert steps(workdir / "out" / "checkpoints", "checkpoint") == [3, 4, 5]
