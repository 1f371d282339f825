"""kill -9 at random moments during saves never leaves a checkpoint that restore would return
torn: restore always gives the newest complete checkpoint, whole."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from corral.sdk import Checkpointer

SCRIPT = Path(__file__).parent / "scripts" / "kill9_writer.py"
TRIALS = 50


def durable_steps(progress: Path) -> list[int]:
    if not progress.exists():
        return []
    steps = []
    for line in progress.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:  # a record cut by the kill
            continue
    return steps


def newest_complete_on_disk(ck: Path) -> int | None:
    """Independent of the Checkpointer: the highest step whose directory holds COMPLETE."""
    steps = []
    for entry in os.listdir(ck) if ck.exists() else []:
        m = re.fullmatch(r"ckpt-(\d+)(\.old)?", entry)
        if m and (ck / entry / "COMPLETE").is_file():
            steps.append(int(m.group(1)))
    return max(steps, default=None)


@pytest.mark.slow
def test_kill9_during_saves_never_yields_a_torn_or_stale_checkpoint(tmp_path: Path):
    rng = random.Random(20240611)
    ck = tmp_path / "ck"
    progress = tmp_path / "progress.jsonl"
    env = {**os.environ, "CORRAL_PROGRESS_FILE": str(progress), "OPENBLAS_NUM_THREADS": "1"}
    server = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(ck)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        killed_after_a_save = sum(
            run_trial(server, trial, rng, ck, progress) for trial in range(TRIALS)
        )
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    assert killed_after_a_save >= TRIALS // 2  # the kills really landed amid saving


def run_trial(server: subprocess.Popen, trial: int, rng: random.Random, ck: Path, progress: Path):
    """Fork a writer, SIGKILL it after a random delay, check what restore returns."""
    server.stdin.write("go\n")
    server.stdin.flush()
    ready = server.stdout.readline().split()
    assert ready[:1] == ["ready"], f"trial {trial}: writer did not start: {ready}"
    started_with = len(durable_steps(progress))
    time.sleep(rng.uniform(0.0, 0.25))
    os.kill(int(ready[1]), signal.SIGKILL)
    assert server.stdout.readline() == "dead\n"
    durable = durable_steps(progress)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torn checkpoint may even be seen
        state = Checkpointer(ck).restore()
    if not durable:
        return False
    assert state is not None, f"trial {trial}: steps {durable} were durable, restore gave None"
    step = state["step"]
    assert step >= durable[-1], f"trial {trial}: restored {step}, {durable[-1]} was durable"
    assert step == newest_complete_on_disk(ck), f"trial {trial}"
    assert np.all(state["w"] == step) and state["w"].shape == (200_000,)
    assert np.all(state["b"] == step % 251)
    assert state["blob"] == bytes([step % 256]) * 50_000
    return len(durable) > started_with
