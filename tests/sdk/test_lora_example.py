"""examples/lora-finetune end to end: train, SIGTERM mid-run (exit 75), run again, resumed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("transformers")

from corral.wire.env import EXIT_PREEMPTED
from support.waiting import wait_until

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lora-finetune"
STEPS = 30
SETTINGS = [f"steps={STEPS}", "save_steps=1000", "seq_len=32", "batch_size=4"]


def progress_steps(path: Path) -> list[int]:
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if record.get("kind") == "progress" and record.get("loss") is not None:
            steps.append(record["step"])
    return steps


def start(workdir: Path, progress: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "CORRAL_PROGRESS_FILE": str(progress),
        "CORRAL_GRACE_SECONDS": "30",
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.Popen(
        [sys.executable, "train.py", *(f"--set={item}" for item in SETTINGS)],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_sigterm_mid_run_exits_75_and_the_rerun_resumes_from_the_saved_step(tmp_path):
    workdir = tmp_path / "lora"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns("out", "corral-run"))
    first_progress = tmp_path / "first.jsonl"

    first = start(workdir, first_progress)

    def trained_3_steps() -> bool:
        if any(s >= 3 for s in progress_steps(first_progress)):
            return True
        assert first.poll() is None, first.communicate()[0]
        return False

    wait_until(trained_3_steps, 60, message="three training steps")
    first.send_signal(signal.SIGTERM)
    output, _ = first.communicate(timeout=60)
    assert first.returncode == EXIT_PREEMPTED, output

    checkpoints = sorted((workdir / "out" / "checkpoints").glob("checkpoint-*"))
    assert len(checkpoints) == 1, output
    saved_step = int(checkpoints[0].name.split("-")[1])
    assert 3 <= saved_step < STEPS
    assert max(progress_steps(first_progress)) == saved_step

    second_progress = tmp_path / "second.jsonl"
    second = start(workdir, second_progress)
    output, _ = second.communicate(timeout=120)
    assert second.returncode == 0, output
    assert f"resuming from out/checkpoints/checkpoint-{saved_step}" in output
    assert progress_steps(second_progress) == list(range(saved_step + 1, STEPS + 1))
    assert f"done: {STEPS} steps" in output
    assert (workdir / "out" / "adapter" / "adapter_model.safetensors").is_file()
