"""The idle watcher sees the steps read from a stage's log (its ``progress`` preset) as it sees
the SDK's reports: a job that never imports corral and prints nanoGPT's lines is not idle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.providers.local.provider import LocalProvider
from corral.store import Store

from .helpers import submit, tick_until, write_spec

pytestmark = pytest.mark.slow

NANOGPT = """\
import time
print("Overriding: max_iters = 12", flush=True)
for i in range(12):
    print(f"iter {i}: loss {4.0 - i * 0.1:.4f}, time 400.00ms, mfu 1.00%", flush=True)
    time.sleep(0.4)
"""


def test_steps_read_from_the_log_reset_the_idle_timer(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:1")  # fake GPUs report 0% utilisation
    script = tmp_path / "train.py"
    script.write_text(NANOGPT)
    spec = write_spec(
        tmp_path,
        f"""
        name: steady-log
        resources: {{gpus: "L40S:1"}}
        limits: {{idle_timeout: 2s}}
        stages:
          - name: train
            gpus: 1
            run: {sys.executable} {script}
            progress: nanogpt
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    controller = Controller(
        Context(
            store=store, providers={"local": LocalProvider()}, settings=Settings(tick_seconds=0.1)
        )
    )
    run = tick_until(controller, store, run_id, lambda run: run.terminal, 60.0)
    assert run.state == "SUCCEEDED", run.reason
    steps = [e.data["step"] for e in store.events(run_id, types=["progress"])]
    assert steps and all(0 <= s <= 11 for s in steps)
