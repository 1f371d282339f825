"""Recovery end to end on the fake spot cloud: a run preempted three times finishes with the
same weights as an uninterrupted run and never repeats its completed data-prep stage."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.store import Store

pytestmark = pytest.mark.slow
TRAINER = Path(__file__).with_name("trainer.py")


def test_three_preemptions_same_weights_and_prep_runs_once(tmp_path: Path, monkeypatch) -> None:
    # the reference: the same job, uninterrupted, without corral
    ref = tmp_path / "ref"
    ref.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_CHECKPOINT_DIR"] = str(ref / "ckpt")
    subprocess.run(
        [sys.executable, str(TRAINER), "--step-seconds", "0", "--total", "80"],
        cwd=ref,
        env=env,
        check=True,
        capture_output=True,
    )
    expected = np.load(ref / "out" / "weights.npy")

    cloud = tmp_path / "cloud.json"
    cloud.write_text(
        json.dumps(
            {
                "launch_delay_s": 0.2,
                "notice_s": 5.0,
                "offers": [
                    {
                        "id": "cpu-a",
                        "region": "r1",
                        "gpu_count": 0,
                        "spot_price": 0.1,
                        "on_demand_price": 0.3,
                        "capacity": 2,
                    },
                    {
                        "id": "cpu-b",
                        "region": "r2",
                        "gpu_count": 0,
                        "spot_price": 0.12,
                        "on_demand_price": 0.35,
                        "capacity": 2,
                    },
                ],
                "preemptions": [{"launch": i, "after_s": 3.0} for i in range(3)],
            }
        )
    )
    monkeypatch.setenv("CORRAL_FAKE_CLOUD", str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(
        work,
        f"""
        name: spotty
        resources: {{spot: true}}
        recovery: {{max_preemption_restarts: 5, strategy: next-cheapest}}
        stages:
          - name: prep
            run: echo prepared >> "$CORRAL_CHECKPOINT_DIR/prep-runs.txt"
          - name: train
            needs: [prep]
            run: {sys.executable} {TRAINER} --total 80
        artifacts: {{paths: [out/**], storage: {tmp_path / "store"}}}
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    proc = start_controller(tick=0.2)
    try:
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}, timeout=120)
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    attempts = store.attempts(run_id)
    assert [a.exit_reason for a in attempts] == ["preempted"] * 3 + ["succeeded"]
    # the machines share no file with this one: the cloud's volume of the run, the artifacts
    volume = Path(os.environ["CORRAL_HOME"]) / "fake" / "volumes" / run_id / "checkpoints"
    assert (volume / "prep-runs.txt").read_text().count("prepared") == 1
    assert len(store.events(run_id, types=["run.recovering"])) == 3
    # next-cheapest moved away from the region that was just preempted each time
    regions = [a.offer["region"] for a in attempts]
    assert all(a != b for a, b in itertools.pairwise(regions)), regions
    got = np.load(tmp_path / "store" / run_id / "artifacts" / "out" / "weights.npy")
    assert np.array_equal(got, expected)  # bit for bit: nothing lost, nothing repeated
    assert store.resources(run_id=run_id, open_only=True) == []
    assert run.cost_usd > 0
