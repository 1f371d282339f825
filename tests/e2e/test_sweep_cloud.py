"""A sweep on the simulated spot cloud: a trial whose machine is preempted (past step 10) resumes from its
checkpoint on a new machine (not from step 0) and its trial completes with the value it
would have had uninterrupted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.control.providers import load_providers
from corral.service.preempt import preempt_run
from corral.service.sweeps import launch_sweep, sweep_status
from corral.store import Store
from support.waiting import wait_until

pytestmark = pytest.mark.slow

JOB = """\
import os, time
from corral import sdk
sdk.install_signal_handlers()
ck = sdk.Checkpointer()
state = ck.restore()
step = state["step"] if state else 0
with open(os.environ["MARKS"], "a") as marks:
    marks.write(f"{os.environ['LR']} {os.environ.get('CORRAL_ATTEMPT')} {step}\\n")
lr = float(os.environ["LR"])
while step < 40:
    step += 1
    time.sleep(0.1)
    sdk.report(step=step, total=40, loss=(lr - 0.3) ** 2 + 1.0 / step)
    with open(os.environ["MARKS"] + ".steps", "a") as marks:
        marks.write(f"{os.environ['LR']} {os.environ.get('CORRAL_ATTEMPT')} {step}\\n")
    if step % 5 == 0:
        ck.save({"step": step}, step)
    sdk.exit_if_preempted(ck, lambda: {"step": step}, step)
"""


def _reached(steps: Path, lr: str, *, attempt: str, step: int) -> bool:
    """Whether the job with ``lr`` reached ``step`` in ``attempt`` (its per-step marks)."""
    if not steps.exists():
        return False
    for line in steps.read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[:2] == [lr, attempt] and int(words[2]) >= step:
            return True
    return False


def test_a_preempted_trial_resumes_from_its_checkpoint(tmp_path: Path, monkeypatch) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(
        json.dumps(
            {
                "launch_delay_s": 0.1,
                "notice_s": 3.0,
                "offers": [
                    {"id": "cpu", "region": "r1", "gpu_count": 0, "spot_price": 0.1, "capacity": 4}
                ],
            }
        )
    )
    monkeypatch.setenv("CORRAL_FAKE_CLOUD", str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(JOB)
    marks = tmp_path / "marks.txt"
    (work / "corral.yaml").write_text(
        f"name: spot-sweep\nrun: {sys.executable} train.py\n"
        f"env: {{LR: '0.1', MARKS: '{marks}'}}\n"
        "resources: {spot: true}\n"
        f"checkpoints: {{storage: 'file://{tmp_path / 'bucket'}'}}\n"
        "recovery: {max_preemption_restarts: 3}\n"
        "sweep:\n"
        "  parameters: {env.LR: {values: [0.3, 0.5]}}\n"
        "  metric: {name: loss}\n"
        "  search: grid\n"
        "  max_parallel: 1\n"
        "  prune: {pruner: none}\n"
    )
    launch_sweep(work / "corral.yaml", start_controller=False)
    store = Store.open()
    controller = Controller(
        Context(store=store, providers=load_providers()[0], settings=Settings(tick_seconds=0.2))
    )

    steps = Path(f"{marks}.steps")
    preempted: list[str] = []

    def done() -> bool:
        controller.tick()
        # the first trial's machine is preempted once its job is past step 10
        if not preempted and _reached(steps, "0.3", attempt="1", step=10):
            [first] = store.trials("spot-sweep")[:1]
            preempt_run(first.run_id, grace=5.0, store=store)
            preempted.append(first.run_id)
        return store.get_sweep("spot-sweep").state in ("FINISHED", "STOPPED")

    wait_until(done, 240, 0.2, lambda: json.dumps(sweep_status("spot-sweep").to_json()))
    view = sweep_status("spot-sweep")
    assert view.state == "FINISHED" and [t.state for t in view.trials] == ["complete"] * 2
    first = view.trials[0]
    attempts = store.attempts(first.run_id)
    assert [a.exit_reason for a in attempts] == ["preempted", "succeeded"]
    starts = [line.split() for line in marks.read_text().splitlines() if line.startswith("0.3 ")]
    assert [s[1] for s in starts] == ["1", "2"] and int(starts[1][2]) >= 5  # resumed, not 0
    assert first.step == 40 and first.value == pytest.approx(1.0 / 40)
    assert view.best_trial == 0
