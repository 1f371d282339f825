"""End to end on the fake SaladCloud and IO.net: a run under a real controller, whose agent
runs as the container in its own root (its code shipped, its checkpoints on the container's
disk; the workdir is deleted once the run is submitted), is interrupted twice - SaladCloud
reallocates the replica, IO.net replaces the container, neither with notice - recovers each
time on a new container group or deployment from its last checkpoint in object storage,
finishes with the result of an uninterrupted run, and leaves no group or deployment behind."""

from __future__ import annotations

import json
import shutil

import pytest

from corral.store import Store
from support.waiting import wait_until

from .clouds import GPUS, assert_contract_clean, live, start_fake

pytestmark = [pytest.mark.slow]

STEPS = 60
JOB = f"""\
import json, os, time
from corral import sdk
ck = sdk.Checkpointer()
state = ck.restore()
step, total = (state["step"], state["total"]) if state else (0, 0)
attempt = int(os.environ["CORRAL_ATTEMPT"])
print(f"attempt {{attempt}} starts at step {{step}}", flush=True)
# the attempts the test interrupts go slowly, so none can finish before its interruption lands
pace = 0.5 if attempt < 3 else 0.1
while step < {STEPS}:
    step += 1
    total += step * step
    time.sleep(pace)
    if step % 5 == 0:
        ck.save({{"step": step, "total": total}}, step)
ck.wait()
os.makedirs("out", exist_ok=True)
with open("out/result.json", "w") as f:
    json.dump({{"step": step, "total": total}}, f)
"""
UNINTERRUPTED = sum(i * i for i in range(1, STEPS + 1))


@pytest.mark.parametrize("kind", ["salad", "ionet"])
def test_a_run_interrupted_twice_finishes_like_an_uninterrupted_one_and_leaves_nothing(
    kind, tmp_path, monkeypatch
):
    from control.helpers import wait_for, write_spec
    from corral.service.submit import submit_run

    fake, env = start_fake(kind, tmp_path / "cloud")
    gpus = GPUS[kind]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    bucket = tmp_path / "bucket"
    spec = write_spec(
        work,
        f"""
        name: twice
        run: python job.py
        resources: {{gpus: "{gpus}", providers: [{kind}]}}
        checkpoints: {{storage: "file://{bucket}", keep_last: 2}}
        artifacts: {{paths: ["out/**"], storage: "file://{bucket}"}}
        recovery: {{max_preemption_restarts: 3}}
        """,
    )
    run_id = submit_run(spec).run.id  # packs the code, launches attempt 1, starts a controller
    shutil.rmtree(work)  # only what travels (the code bundle, the storage) reaches a container
    store = Store.open()
    try:
        for attempt in (1, 2):

            def uploaded(n: int = attempt) -> bool:
                events = store.events(run_id, types=["checkpoint.uploaded"])
                return sum(e.attempt == n for e in events) >= 2

            wait_until(uploaded, timeout=90, interval=0.2, message=f"attempt {attempt}'s uploads")
            [res] = [r for r in store.resources(run_id=run_id, open_only=True) if r.instance_id]
            fake.interrupt(res.instance_id)  # no notice: the container just dies
            wait_until(
                lambda n=attempt: store.get_run(run_id).attempt > n,
                timeout=90,
                interval=0.2,
                message=f"attempt {attempt + 1}",
            )
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=120)
        wait_until(lambda: not live(kind, fake), timeout=30, message="nothing left running")
    finally:
        fake.close()
    assert_contract_clean(fake)
    assert run.state == "SUCCEEDED", run.reason
    reasons = [a.exit_reason for a in store.attempts(run_id)]
    assert reasons == ["preempted", "preempted", "succeeded"], reasons
    result = json.loads((bucket / run_id / "artifacts" / "out" / "result.json").read_text())
    assert result == {"step": STEPS, "total": UNINTERRUPTED}
    ready = store.events(run_id, types=["code.ready"])
    assert [(e.attempt, e.data["source"]) for e in ready] == [(n, "storage") for n in (1, 2, 3)]
    assert len(store.events(run_id, types=["code.uploaded"])) == 1  # sent once
    restored = store.events(run_id, types=["checkpoint.restored"])
    assert {e.attempt for e in restored} == {2, 3}  # from object storage, not a shared disk
    assert store.resources(run_id=run_id, open_only=True) == []
