"""A job that never imports corral (a real HF Trainer run, tests/support/tool_scripts/
hf_trainer.py: a tokenisation bar first, then the Trainer's bar redrawn with ``\\r`` on stderr
and its log dicts printed between) run under a real controller on the local provider with
``progress: hf``: its progress shows in ``corral status --json`` and reaches a progress webhook
on loopback, as the SDK's ``report()`` would; and the same on the fake cloud, whose machines do
not share the controller's files."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.cli.app import app
from corral.store import Store
from support.waiting import wait_until

pytestmark = pytest.mark.slow

HF_TRAINER = Path(__file__).parents[1] / "support" / "tool_scripts" / "hf_trainer.py"


def _status(run_id: str) -> dict:
    result = CliRunner().invoke(app, ["status", run_id, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _train_progress(status: dict, stage: str = "train") -> dict | None:
    attempts = status.get("attempts") or []
    for found in (status.get("stages") or []) + [
        s for a in attempts for s in ((a.get("status") or {}).get("stages") or [])
    ]:
        if found.get("name") == stage and isinstance(found.get("progress"), dict):
            return found["progress"]
    return None


@pytest.mark.torch
def test_progress_read_from_the_log_shows_in_status_and_reaches_a_webhook(tmp_path, receivers):
    pytest.importorskip("transformers")
    rx = receivers()
    spec = write_spec(
        tmp_path,
        f"""
        name: foreign
        stages:
          - name: train
            run: {sys.executable} {HF_TRAINER} out 1000 0.05
            progress: hf
        notify:
          webhooks:
            - url: {rx.url}
              progress_interval: 1s
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    proc = start_controller()
    try:
        seen: dict = {}

        def shown() -> bool:
            seen.update(_status(run_id))
            progress = _train_progress(seen)
            return bool(progress) and progress.get("loss") is not None

        wait_until(shown, 60, 0.2, lambda: f"a loss in corral status; it shows {seen}")
        progress = _train_progress(seen)
        assert progress["total"] == 1000 and progress["step"] >= 5  # not the tokenisation's 184
        assert progress["metrics"]["learning_rate"] == 5e-05 and progress["epoch"] > 0
        assert 0 < progress["loss"] < 10
        # the agent sends one progress event every 10 s: the second one carries a loss
        wait_until(
            lambda: any(
                r.json["data"]["loss"] is not None for r in rx.accepted() if r.type == "progress"
            ),
            40,
            0.2,
            "a progress webhook with a loss",
        )
        later = _train_progress(_status(run_id))  # the ETA, from the rate of the steps read
        assert later["step"] > progress["step"] and later["steps_per_s"] > 0
        assert later["eta_s"] > 0
        (tmp_path / "release").write_text("")
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"})
        assert run.state == "SUCCEEDED", run.reason
    finally:
        proc.terminate()
        proc.wait(10)
    hooks = [r.json["data"] for r in rx.accepted() if r.type == "progress"]
    assert hooks[0]["stage"] == "train" and hooks[0]["total"] == 1000
    assert all(0 <= h["step"] <= 1000 and h["total"] == 1000 for h in hooks)
    assert 0 < hooks[-1]["loss"] < 10


NANOCHAT = textwrap.dedent(
    """
    import time

    for step in range(0, 21):
        print(
            f"step {step:05d}/00020 ({100 * step / 20:.2f}%) | loss: {4.0 - step * 0.1:.6f} | "
            f"lrm: 1.00 | dt: 50.00ms | tok/sec: 12,345 | mfu: 1.00 | total time: 0.01m",
            flush=True,
        )
        time.sleep(0.05)
    """
)


def test_progress_from_the_log_on_a_machine_that_does_not_share_our_files(
    tmp_path, receivers, monkeypatch
):
    """The fake cloud (a nanochat-style stand-in): the code and the plan, with its pattern,
    travel to the machine; the status and the webhook come back from it."""
    from corral.providers.fake import ENV_FAKE_CLOUD

    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({"launch_delay_s": 0.1}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    work = tmp_path / "job"
    work.mkdir()
    (work / "train.py").write_text(NANOCHAT)
    rx = receivers()
    spec = write_spec(
        work,
        f"""
        name: foreign-remote
        run: python train.py
        progress: nanochat
        notify:
          webhooks:
            - url: {rx.url}
              progress_interval: 1s
        """,
    )
    result = CliRunner().invoke(app, ["launch", str(spec), "--wait", "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["state"] == "SUCCEEDED", run["reason"]
    progress = _train_progress(_status(run["id"]), stage="main")
    assert (progress["step"], progress["total"], progress["percent"]) == (20, 20, 100.0)
    assert progress["loss"] == 2.0 and progress["metrics"]["tok/sec"] == 12345
    wait_until(lambda: "progress" in rx.types(), 10, 0.1, "a progress webhook")
    hook = next(r.json["data"] for r in rx.accepted() if r.type == "progress")
    assert hook["stage"] == "main" and hook["total"] == 20 and hook["loss"] is not None


def test_every_parallel_stage_reaches_a_progress_webhook(tmp_path, receivers):
    """Three stages running side by side (an 8-GPU pipeline's shape) each report progress; the
    webhook's ``progress_interval`` applies per stage, so all three reach the receiver, not
    only the first to report."""
    work = tmp_path / "job"
    work.mkdir()
    (work / "train.py").write_text(NANOCHAT)
    rx = receivers()
    stages = "".join(
        f"  - name: {name}\n    run: python train.py\n    progress: nanochat\n"
        for name in ("pretrain", "distill", "probe")
    )
    spec = write_spec(
        work,
        "name: parallel\nstages:\n"
        + stages
        + f"notify:\n  webhooks:\n    - url: {rx.url}\n      progress_interval: 1h\n",
    )
    result = CliRunner().invoke(app, ["launch", str(spec), "--wait", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state"] == "SUCCEEDED"

    def stages_heard() -> set[str]:
        return {r.json["data"]["stage"] for r in rx.accepted() if r.type == "progress"}

    wait_until(lambda: len(stages_heard()) == 3, 15, 0.1, lambda: f"heard {stages_heard()}")
    assert stages_heard() == {"pretrain", "distill", "probe"}
    # one per stage within the hour
    assert sum(1 for r in rx.accepted() if r.type == "progress") == 3
