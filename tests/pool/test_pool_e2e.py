"""The pool end to end: a real controller, two ``corral worker`` machines with one fake GPU
each, real Redis and the store: priorities decide who gets the next GPU, a worker killed with
-9 is a lost machine whose run resumes from its checkpoint on the other one."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.queue.attempts import AttemptStore
from corral.queue.client import connect
from corral.queue.keys import Keys
from corral.queue.settings import PoolSettings
from corral.store import Store
from support.pool import Workers
from support.waiting import wait_until

pytestmark = pytest.mark.slow
TRAINER = Path(__file__).parents[1] / "e2e" / "trainer.py"
ENDED = {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}
#: two workers that take two runs at the same moment may start them in either order
JITTER_S = 1.0


@pytest.fixture
def workers(pool: PoolSettings, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(pool, tmp_path / "machines", fake_gpus="L40S:2")
    try:
        yield w
    finally:
        w.stop_all()


def test_the_highest_priority_waiting_run_gets_the_next_gpu(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    # the pool's shape is known (its workers joined once), then it is scaled down to zero
    workers.start("m0", "0")
    workers.start("m1", "1")
    for machine in ("m0", "m1"):
        workers.procs[machine].terminate()  # warm shutdown: nothing runs, nothing is lost
        workers.procs[machine].wait(30)
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(
        work,
        """
        name: prio
        resources: {{gpus: 1}}
        run: |
          echo "start $CORRAL_RUN_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N)" >> {log}
          sleep 4
          echo "end $CORRAL_RUN_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N)" >> {log}
        """.format(log=work / "order.log"),
    )
    priorities = [5, 9, 5, 1, 5, 9]  # submitted in this order
    runs = [submit(spec, [f"priority={p}"]) for p in priorities]
    store = Store.open()
    controller = start_controller(tick=0.2)
    try:
        attempts = AttemptStore(connect(pool), Keys(pool.name))
        wait_until(  # every run waits in the queue
            lambda: all((a := attempts.get(f"{r}-a1")) and a.state == "queued" for r in runs),
            60,
            0.2,
        )
        workers.start("m0", "0")  # the GPUs come back
        workers.start("m1", "1")
        for run_id in runs:
            assert wait_for(store, run_id, ENDED, timeout=120).state == "SUCCEEDED"
    finally:
        controller.terminate()
        controller.wait(10)
    lines = [ln.split() for ln in (work / "order.log").read_text().splitlines()]
    starts = sorted((float(t), run) for kind, run, _, t in lines if kind == "start")
    assert len(starts) == 6  # each run once
    # when a worker took each run's attempt off the queue (the queue's order: the process
    # that claims it and starts its agent comes after, seconds later on a loaded machine)
    taken = {run: attempts.get(f"{run}-a1").received_at for run in runs}  # type: ignore[union-attr]
    # the next free GPU took the highest-priority waiting run, equal priorities first come
    # first served: a run was never taken after one it goes before, except when the two
    # workers took both at the same moment (within JITTER_S, less than one job's 4 s)
    rank = sorted(range(6), key=lambda i: (-priorities[i], i))
    for i, a in enumerate(rank):
        for b in rank[i + 1 :]:
            assert taken[runs[a]] <= taken[runs[b]] + JITTER_S, (
                f"run of priority {priorities[b]} (#{b}) was taken before the one of priority "
                f"{priorities[a]} (#{a}): "
                f"{sorted((t, priorities[runs.index(r)]) for r, t in taken.items())}"
            )
    # never two runs on one GPU at once
    spans: dict[str, list[tuple[float, float]]] = {}
    begun = {(run, gpu): float(t) for kind, run, gpu, t in lines if kind == "start"}
    for kind, run, gpu, t in lines:
        if kind == "end":
            spans.setdefault(gpu, []).append((begun[(run, gpu)], float(t)))
    assert sorted(spans) == ["0", "1"]
    for gpu, intervals in spans.items():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end, f"two runs at once on GPU {gpu}: {intervals}"


def test_a_worker_killed_mid_run_is_a_lost_machine_and_the_run_resumes_elsewhere(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    ref = tmp_path / "ref"  # the same job, uninterrupted, without corral
    ref.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_CHECKPOINT_DIR"] = str(ref / "ckpt")
    subprocess.run(
        [sys.executable, str(TRAINER), "--step-seconds", "0", "--total", "60"],
        cwd=ref,
        env=env,
        check=True,
        capture_output=True,
    )
    expected = np.load(ref / "out" / "weights.npy")

    workers.start("m0", "0")
    workers.start("m1", "1")
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(
        work,
        f"""
        name: lost
        resources: {{gpus: 1}}
        run: echo "started attempt $CORRAL_ATTEMPT" >> {work}/starts.log && {sys.executable} {TRAINER} --total 60 --step-seconds 0.2
        checkpoints: {{storage: "{tmp_path}/store"}}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    controller = start_controller(tick=0.2)
    attempts = AttemptStore(connect(pool), Keys(pool.name))
    try:

        def checkpointed() -> bool:
            progress = store.events(run_id, types=["checkpoint.saved"])
            return len(progress) >= 2

        wait_until(checkpointed, 90, 0.2, "two checkpoints of the first attempt")
        first = attempts.get(f"{run_id}-a1")
        assert first is not None and first.state == "running"
        machine = first.worker.rsplit("-gpu", 1)[0]
        workers.kill(machine)  # kill -9: the worker, its attempt and its agent are gone
        run = wait_for(store, run_id, ENDED, timeout=120)
    finally:
        controller.terminate()
        controller.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    assert [a.exit_reason for a in store.attempts(run_id)] == ["preempted", "succeeded"]
    second = attempts.get(f"{run_id}-a2")
    assert second is not None and second.worker != first.worker  # on the other machine
    assert attempts.get(f"{run_id}-a1").state == "lost"  # type: ignore[union-attr]
    # each attempt started once: no second copy of either, ever
    assert (work / "starts.log").read_text().splitlines() == [
        "started attempt 1",
        "started attempt 2",
    ]
    logs = (Path(os.environ["CORRAL_HOME"]) / "runs" / run_id / "logs" / "a2").rglob("*.log")
    assert any("resumed at step" in p.read_text() for p in logs)
    # nothing lost, nothing repeated: the weights of the uninterrupted run, bit for bit
    # (the code was shipped to each worker: the job wrote its weights on the second machine)
    [weights] = (tmp_path / "machines").rglob(f"{run_id}/work/out/weights.npy")
    assert second.worker.rsplit("-gpu", 1)[0] in weights.parts
    assert np.array_equal(np.load(weights), expected)


def test_a_worker_stopped_twice_lets_its_run_checkpoint_and_resume_elsewhere(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    workers.start("m0", "0")
    workers.start("m1", "1")
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(
        work,
        f"""
        name: drained
        resources: {{gpus: 1}}
        run: {sys.executable} {TRAINER} --total 60 --step-seconds 0.2 --every 1000
        checkpoints: {{storage: "{tmp_path}/store"}}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    controller = start_controller(tick=0.2)
    attempts = AttemptStore(connect(pool), Keys(pool.name))
    try:
        wait_until(lambda: store.events(run_id, types=["progress"]), 90, 0.2, "progress")
        first = attempts.get(f"{run_id}-a1")
        assert first is not None and first.state == "running"
        machine = workers.procs[first.worker.rsplit("-gpu", 1)[0]]
        machine.send_signal(signal.SIGTERM)  # stop taking attempts...
        time.sleep(0.5)
        machine.send_signal(signal.SIGTERM)  # ...and hand the running one back now
        assert machine.wait(60) == 0
        run = wait_for(store, run_id, ENDED, timeout=120)
    finally:
        controller.terminate()
        controller.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    assert [a.exit_reason for a in store.attempts(run_id)] == ["preempted", "succeeded"]
    assert attempts.get(f"{run_id}-a1").state == "preempted"  # type: ignore[union-attr]
    # no periodic checkpoint (--every 1000): the second attempt resumed from the one the
    # SDK saved on SIGTERM
    logs = (Path(os.environ["CORRAL_HOME"]) / "runs" / run_id / "logs" / "a2").rglob("*.log")
    assert any("resumed at step" in p.read_text() for p in logs)
