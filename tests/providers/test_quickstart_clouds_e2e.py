"""The quickstart on each fake container cloud, through the CLI and a real controller: the
agent runs as the container in its own root with the code shipped (the workdir is deleted as
soon as the run is launched), the run is interrupted twice without notice (a SaladCloud node
goes away, an IO.net container is replaced), resumes each time from its last checkpoint in
object storage, and finishes with the same evaluation as an uninterrupted run of the same
training, leaving no container group or deployment behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.store import Store
from examples.helpers import QUICKSTART, TINY, run_script, script_env
from support.waiting import wait_until

from .clouds import GPUS, assert_contract_clean, live, start_fake

pytestmark = [pytest.mark.slow, pytest.mark.torch]

#: slow enough to interrupt twice mid-training, small enough to stay a test
SETTINGS = {
    **TINY,
    "QUICKSTART_STEPS": "240",
    "QUICKSTART_EVAL_EVERY": "20",
    "QUICKSTART_N_EMBD": "64",
    "QUICKSTART_BLOCK_SIZE": "64",
    "QUICKSTART_BATCH_SIZE": "16",
}
COMPARED = ("val_loss", "perplexity", "next_char_cer", "next_char_accuracy", "sample")


def _copy(dest: Path) -> Path:
    shutil.copytree(QUICKSTART, dest, ignore=shutil.ignore_patterns("out", "checkpoints"))
    return dest


def _moved_past(store: Store, run_id: str, attempt: int) -> bool:
    run = store.get_run(run_id)
    assert not run.terminal, f"the run ended {run.state} in attempt {run.attempt}: {run.reason}"
    return run.attempt > attempt


def _where(store: Store, run_id: str) -> str:
    """The run's state and its last events, for a failure message."""
    run = store.get_run(run_id)
    last = [f"{e.attempt}:{e.type}" for e in store.events(run_id)][-12:]
    return f"the run is {run.state} ({run.reason}) in attempt {run.attempt}; last events {last}"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The evaluation of the same training run straight through, without corral."""
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("straight")
    work = _copy(base / "quickstart")
    env = script_env(**SETTINGS, CORRAL_CHECKPOINT_DIR=str(base / "checkpoints"))
    for script in ("train.py", "evaluate.py"):
        done = run_script(work / script, cwd=work, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
    return json.loads((work / "out" / "eval_report.json").read_text())


@pytest.mark.parametrize("kind", ["salad", "ionet"])
def test_the_quickstart_interrupted_twice_evaluates_like_an_uninterrupted_run(
    kind, uninterrupted, tmp_path, monkeypatch
):
    fake, env = start_fake(kind, tmp_path / "cloud")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    work = _copy(tmp_path / "quickstart")
    bucket = tmp_path / "bucket"
    sets = [f"env.{k}={v}" for k, v in SETTINGS.items()] + [
        f"resources.providers=[{kind}]",
        f"resources.gpus={GPUS[kind]}",
        f"checkpoints.storage=file://{bucket}",
        f"artifacts.storage=file://{bucket}",
        "recovery.max_preemption_restarts=3",
    ]
    args = ["launch", str(work / "corral.yaml"), "--detach", "--json"]
    for item in sets:
        args += ["--set", item]
    try:
        launched = CliRunner().invoke(app, args)
        assert launched.exit_code == 0, launched.output
        run_id = json.loads(launched.stdout)["id"]
        shutil.rmtree(work)  # only the shipped code and the storage reach a container
        store = Store.open()
        for attempt in (1, 2):
            # attempt 1 is interrupted once it has put a checkpoint in storage; attempt 2 as
            # soon as it has restored one (training on from there could otherwise finish the
            # run before a slow machine delivers the interruption)
            wanted = "checkpoint.uploaded" if attempt == 1 else "checkpoint.restored"

            def saved(n: int = attempt, kind_: str = wanted) -> bool:
                run = store.get_run(run_id)
                assert run.state not in ("FAILED", "SUCCEEDED"), run.reason
                return any(e.attempt == n for e in store.events(run_id, types=[kind_]))

            wait_until(saved, timeout=180, interval=0.2, message=f"attempt {attempt}'s {wanted}")
            [res] = [r for r in store.resources(run_id=run_id, open_only=True) if r.instance_id]
            fake.interrupt(res.instance_id)
            wait_until(
                lambda n=attempt: _moved_past(store, run_id, n),
                timeout=120,
                interval=0.2,
                message=lambda n=attempt: f"attempt {n + 1}; {_where(store, run_id)}",
            )
        run = wait_until(
            lambda: (r := store.get_run(run_id)).terminal and r,
            timeout=300,
            interval=0.5,
            message="the run's end",
        )
        wait_until(lambda: not live(kind, fake), timeout=30, message="nothing left running")
    finally:
        fake.close()
    assert_contract_clean(fake)
    assert run.state == "SUCCEEDED", run.reason
    reasons = [a.exit_reason for a in store.attempts(run_id)]
    assert reasons[:2] == ["preempted", "preempted"] and reasons[-1] == "succeeded"
    restored = {e.attempt for e in store.events(run_id, types=["checkpoint.restored"])}
    assert {2, 3} <= restored  # from object storage: each container starts with nothing
    report = json.loads((bucket / run_id / "artifacts" / "out" / "eval_report.json").read_text())
    assert {k: report[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}
    assert store.resources(run_id=run_id, open_only=True) == []
    ready = store.events(run_id, types=["code.ready"])
    assert {e.data["source"] for e in ready} == {"storage"} and len(ready) >= 3
    assert len(store.events(run_id, types=["code.uploaded"])) == 1  # the code went up once
