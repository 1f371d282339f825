"""A RunPod run whose agent never comes up (its image has no python, so the node bootstrap stops
at once): while its pod waits, `corral logs` shows what the pod printed, from RunPod's log
stream; the provision timeout then fails the run and terminates the pod, whose log RunPod
keeps no longer: the controller kept its tail before the teardown, and `corral logs` shows
that copy (without one, `corral logs --machine` says the log is gone)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.store import Store
from support.waiting import wait_until

from .fake_cloud import IMAGE_WITHOUT_PYTHON
from .fake_server import API_KEY

T = TypeVar("T")


@pytest.mark.slow
def test_the_pods_log_shows_why_the_agent_never_came_up(make_provider, fake, tmp_path, monkeypatch):
    from control.helpers import submit, write_spec

    env = {
        **{f"CORRAL_RUNPOD_{k.upper()}": v for k, v in fake.settings().items()},
        "CORRAL_RUNPOD_RATE_PER_S": "none",
        "CORRAL_RUNPOD_LOG_READ_S": "1",
        "CORRAL_PROVIDERS": "runpod",
        "RUNPOD_API_KEY": API_KEY,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "train.py").write_text("print('never runs')\n")
    spec = write_spec(
        tmp_path,
        f"""
        name: no-python
        run: python train.py
        image: {IMAGE_WITHOUT_PYTHON}
        resources: {{gpus: "L40S:1", spot: false, providers: [runpod]}}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    settings = Settings(provision_timeout_s=8)
    controller = Controller(
        Context(store=store, providers={"runpod": make_provider()}, settings=settings)
    )

    def ticking(predicate: Callable[[], T], message: str, timeout: float = 30) -> T:
        def tick() -> T:
            controller.tick()
            return predicate()

        return wait_until(tick, timeout=timeout, interval=0.2, message=message)

    pod = ticking(lambda: next(iter(fake.cloud.list()), None), "the pod")
    assert fake.creates[0]["image"] == IMAGE_WITHOUT_PYTHON
    path = fake.cloud.log_path(pod.id)
    wait_until(lambda: path.exists() and "no python" in path.read_text(), message="the bootstrap")
    assert store.get_run(run_id).state == "PROVISIONING"

    shown = CliRunner().invoke(app, ["logs", run_id])
    assert shown.exit_code == 0, shown.output
    assert f"the console log of runpod machine {pod.id}:" in shown.output
    assert "corral bootstrap: no python on this machine" in shown.output
    assert API_KEY not in shown.output

    run = ticking(lambda: (r := store.get_run(run_id)).terminal and r, "the run to end", timeout=60)
    assert run.state == "FAILED"
    # its last words say why, once: no python and no runtime shipped (this run has no storage)
    assert (run.reason or "").startswith(
        "the machine cannot boot corral: no python on this machine and no corral runtime shipped"
    )
    assert fake.cloud.list() == []  # terminated: RunPod keeps its log no longer
    after = CliRunner().invoke(app, ["logs", run_id])  # the controller kept its last words
    assert after.exit_code == 0, after.output
    assert f"machine {pod.id} (kept when the attempt ended):" in after.output
    assert "corral bootstrap: no python on this machine" in after.output
    assert API_KEY not in after.output
    fake.cloud.log_path(pod.id).unlink(missing_ok=True)
    (Path(os.environ["CORRAL_HOME"]) / "runs" / run_id / "machine" / "a1.log").unlink()
    gone = CliRunner().invoke(app, ["logs", run_id, "--machine"])  # nothing kept: says so
    assert gone.exit_code != 0
    assert "RunPod keeps a pod's log only while the pod exists" in gone.output
    assert API_KEY not in gone.output


def test_a_pod_that_cannot_boot_fails_its_run_within_the_boot(
    make_provider, fake, tmp_path, monkeypatch
):
    """The pod's bootstrap says it cannot boot and exits 78: the run fails with that reason as
    soon as the pod's log says it, not at the provision timeout (600 s here), and no other pod
    is created for it."""
    from control.helpers import submit, write_spec
    from support.cannot_boot import NO_PYTHON, run_until_it_ends

    for name, value in {
        **{f"CORRAL_RUNPOD_{k.upper()}": v for k, v in fake.settings().items()},
        "CORRAL_RUNPOD_RATE_PER_S": "none",
        "CORRAL_RUNPOD_LOG_READ_S": "1",
        "CORRAL_PROVIDERS": "runpod",
        "RUNPOD_API_KEY": API_KEY,
    }.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "train.py").write_text("print('never runs')\n")
    spec = write_spec(
        tmp_path,
        f"""
        name: no-python
        run: python train.py
        image: {IMAGE_WITHOUT_PYTHON}
        resources: {{gpus: "L40S:1", spot: false, providers: [runpod]}}
        recovery: {{max_error_restarts: 3}}
        """,
    )
    run_id = submit(spec)
    run, took = run_until_it_ends(run_id, "runpod", make_provider())
    assert run.state == "FAILED" and took < 60
    assert run.reason == f"the machine cannot boot corral: {NO_PYTHON}"
    assert len(fake.creates) == 1
    assert Store.open().attempts(run_id)[-1].number == 1
