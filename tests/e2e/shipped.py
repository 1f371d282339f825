"""The quickstart on a cloud whose machines share nothing with the controller: submitted with
its code packed, the workdir deleted at once (no machine may read it), preempted after its first
checkpoint, recovered on a new machine that gets its code from the run's storage without the
controller sending it again, and finished with the weights of an uninterrupted run.

Used by the fake cloud's, the AWS stand-in's and the RunPod fake's end-to-end tests."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.service.actions import wait_for_end
from corral.service.submit import submit_run
from corral.store import Store
from examples.helpers import QUICKSTART, TINY, run_script, script_env
from support.waiting import wait_until

#: long enough after the first checkpoint (step EVAL_EVERY) that the preemption, sent once the
#: controller has seen that checkpoint, lands before the job could finish on a loaded machine
#: (at 60 steps the job sometimes ended first: "it has no machine to preempt")
STEPS, EVAL_EVERY = 400, 20
SETTINGS = {**TINY, "QUICKSTART_STEPS": str(STEPS), "QUICKSTART_EVAL_EVERY": str(EVAL_EVERY)}


def copy_quickstart(dest: Path) -> Path:
    work = dest / "quickstart"
    shutil.copytree(
        QUICKSTART, work, ignore=shutil.ignore_patterns("out", "corral-run", "checkpoints")
    )
    (work / ".corralignore").write_text("README.md\n")
    return work


def reference_weights(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The final weights of the same training, uninterrupted, run directly with python: trained
    once per test session and shared by the tests here (the training is deterministic), under
    xdist too (a folder of the run's own beside the workers', a lock around the training)."""
    from safetensors.torch import load_file

    base = tmp_path_factory.getbasetemp()
    run_uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    shared = base.parent / f"shipped-reference-{run_uid}" if run_uid else base / "shipped-reference"
    shared.mkdir(exist_ok=True)
    model = shared / "model.safetensors"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not model.exists():
            ref = Path(tempfile.mkdtemp(dir=shared))
            env = script_env(**SETTINGS, CORRAL_CHECKPOINT_DIR=str(ref / "ckpt"))
            done = run_script(QUICKSTART / "train.py", cwd=ref, env=env, timeout=300)
            assert done.returncode == 0, done.stderr
            (ref / "out" / "model" / "model.safetensors").rename(model)
    return load_file(str(model))


def overrides(storage: str, extra: dict[str, str] | None = None) -> list[str]:
    sets = [f"env.{k}={v}" for k, v in {**SETTINGS, **(extra or {})}.items()]
    return [
        *sets,
        f"checkpoints.storage={storage}",
        f"artifacts.storage={storage}",
        "artifacts.paths=[out/**]",
    ]


def run_preempted(
    work: Path,
    storage: str,
    preempt: Callable[[str], None],
    *,
    timeout: float = 300,
    extra_env: dict[str, str] | None = None,
    set_: list[str] | None = None,
):
    """Submit the quickstart in ``work`` (then delete ``work``), call ``preempt(run_id)`` once
    attempt 1 saved a checkpoint, and return the run once it ended."""
    submitted = submit_run(
        work / "corral.yaml", overrides=[*overrides(storage, extra_env), *(set_ or [])]
    )
    run_id = submitted.run.id
    shutil.rmtree(work)  # only what travels (the bundle, the storage) can reach a machine
    store = Store.open()

    def first_checkpoint() -> bool:
        run = store.get_run(run_id)
        assert run.state not in ("FAILED", "CANCELLED", "STOPPED"), run.reason
        return any(e.attempt == 1 for e in store.events(run_id, types=["checkpoint.saved"]))

    wait_until(first_checkpoint, timeout, 0.2, "attempt 1's first checkpoint")
    preempt(run_id)
    return wait_for_end(run_id, timeout_s=timeout)


def check_finished_like_uninterrupted(
    run, storage: Path | Callable[[str], bytes], expected: dict
) -> None:
    """SUCCEEDED on a second machine, the code sent once (to the storage), the weights of the
    uninterrupted run, the manifest naming the code shipped. ``storage``: the storage's
    directory, or ``read(path under it) -> bytes``."""
    import json

    from safetensors.torch import load

    if isinstance(storage, Path):
        root = storage

        def read(rel: str) -> bytes:
            return (root / rel).read_bytes()
    else:
        read = storage

    assert run.state == "SUCCEEDED", run.reason
    store = Store.open()
    attempts = store.attempts(run.id)
    assert [a.exit_reason for a in attempts] == ["preempted", "succeeded"]
    [packed] = store.events(run.id, types=["code.packed"])
    size = packed.data["size"]
    uploads = store.events(run.id, types=["code.uploaded"])
    assert [e.data["bytes"] for e in uploads] == [size]  # once, before attempt 1
    assert store.events(run.id, types=["code.sent"]) == []  # never through an agent
    ready = store.events(run.id, types=["code.ready"])
    assert [(e.attempt, e.data["source"], e.data["bytes"]) for e in ready] == [
        (1, "storage", size),
        (2, "storage", size),
    ]
    restored = store.events(run.id, types=["checkpoint.restored"])
    assert [e.attempt for e in restored] == [2]
    got = load(read(f"{run.id}/artifacts/out/model/model.safetensors"))
    assert got.keys() == expected.keys()
    assert all(bool((got[k] == expected[k]).all()) for k in expected)
    manifest = json.loads(read(f"{run.id}/manifest.json"))
    assert manifest["code"]["sha256"] == packed.data["sha256"]
    assert manifest["code"]["size"] == size and manifest["code"]["source"] == "workdir"
