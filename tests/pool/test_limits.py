"""CPU workers and each job's limits on the pool, end to end: real ``corral worker`` processes
on the local Redis, a real controller and store. A CPU job runs on a CPU worker beside a GPU
job on the same box; a job past ``--job-memory`` ends FAILED with the memory limit as its
reason and is not recovered; ``--job-cpus`` pins the job to its worker's cores (this box has
no delegated cgroup v2: the fallback); bad values are one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.errors import InfeasibleRequest
from corral.providers.base import Requirements
from corral.providers.pool.provider import PoolProvider
from corral.queue.attempts import AttemptStore
from corral.queue.client import connect
from corral.queue.keys import Keys
from corral.queue.limits import Mechanism, cores_for
from corral.queue.registry import Registry, WorkerInfo
from corral.queue.settings import PoolSettings
from corral.store import Store
from corral.store.records import RunRecord
from support.pool import Workers
from support.waiting import wait_until

pytestmark = pytest.mark.slow
ENDED = {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}


@pytest.fixture
def workers(pool: PoolSettings, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(pool, tmp_path / "machines", fake_gpus="L40S:1")
    try:
        yield w
    finally:
        w.stop_all()


def _run_to_end(store: Store, spec: Path) -> tuple[str, RunRecord]:
    """Submit ``spec`` and drive it to its end with a real controller."""
    run_id = submit(spec)
    controller = start_controller(tick=0.2)
    try:
        return run_id, wait_for(store, run_id, ENDED, timeout=120)
    finally:
        controller.terminate()
        controller.wait(10)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )


def test_a_cpu_job_runs_on_a_cpu_worker_beside_a_gpu_job_on_the_same_box(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    workers.start("m0", "0", cpu_slots=1)
    status = json.loads(_cli("pool", "status", "--json").stdout)
    assert {(w["name"], w["gpu_type"], tuple(w["gpus"])) for w in status["workers"]} == {
        ("m0-gpu0", "L40S", ("0",)),
        ("m0-cpu0", "cpu", ()),
    }
    assert {(q["queue"], q["gpu_count"]) for q in status["queues"]} == {
        (f"{pool.name}.l40s.x1", 1),
        (f"{pool.name}.cpu.x0", 0),
    }
    assert "CPU" in _cli("pool", "status").stdout
    work = tmp_path / "work"
    work.mkdir()
    log = work / "both.log"
    # each job says it started, then waits for the other: both must run at once
    body = """
        name: {name}
        {resources}
        run: |
          echo "$CORRAL_RUN_ID gpus=[$CUDA_VISIBLE_DEVICES]" >> {log}
          for i in $(seq 200); do [ "$(wc -l < {log})" -ge 2 ] && break; sleep 0.1; done
          [ "$(wc -l < {log})" -ge 2 ]
        """
    gpu_spec = write_spec(
        work, body.format(name="gpu", resources="resources: {gpus: 1}", log=log), "gpu.yaml"
    )
    cpu_spec = write_spec(work, body.format(name="cpu", resources="", log=log), "cpu.yaml")
    store = Store.open()
    controller = start_controller(tick=0.2)
    try:
        gpu_run = submit(gpu_spec)
        launched = _cli("launch", str(cpu_spec), "--detach", "--json")  # as a user would
        assert launched.returncode == 0, launched.stderr
        cpu_run = json.loads(launched.stdout)["id"]
        for run_id in (gpu_run, cpu_run):
            run = wait_for(store, run_id, ENDED, timeout=120)
            assert run.state == "SUCCEEDED", run.reason
    finally:
        controller.terminate()
        controller.wait(10)
    lines = dict(line.split(" ", 1) for line in log.read_text().splitlines())
    assert lines == {gpu_run: "gpus=[0]", cpu_run: "gpus=[]"}
    attempts = AttemptStore(connect(pool), Keys(pool.name))
    assert attempts.get(f"{gpu_run}-a1").worker == "m0-gpu0"  # type: ignore[union-attr]
    cpu_attempt = attempts.get(f"{cpu_run}-a1")
    assert cpu_attempt is not None and cpu_attempt.worker == "m0-cpu0"
    assert cpu_attempt.queue == f"{pool.name}.cpu.x0"


def test_the_pool_offers_cpu_capacity_only_where_cpu_workers_registered(
    pool: PoolSettings,
) -> None:
    provider = PoolProvider(pool)
    registry = Registry(connect(pool), Keys(pool.name))
    gpu = WorkerInfo("b-gpu0", "b", 1, f"{pool.name}.l40s.x1", "L40S", ["0"], 4, 8.0, 0.0)
    registry.register(gpu, 30)
    with pytest.raises(InfeasibleRequest, match=r"no CPU worker has joined.*--cpu-slots"):
        provider.offers(Requirements())
    cpu = WorkerInfo("b-cpu0", "b", 2, f"{pool.name}.cpu.x0", "cpu", [], 2, 4.0, 0.0)
    registry.register(cpu, 30)
    [offer] = provider.offers(Requirements())
    assert (offer.offer_id, offer.gpu_count, offer.gpu_type) == (f"{pool.name}.cpu.x0", 0, None)
    [gpu_offer] = provider.offers(Requirements(gpu_count_min=1, gpu_count_max=1))
    assert gpu_offer.offer_id == f"{pool.name}.l40s.x1"  # a GPU job never goes to the CPUs
    with pytest.raises(InfeasibleRequest, match="more CPUs or memory"):
        provider.offers(Requirements(cpus=3))


GROW = """
import time
chunks = []
for i in range(30):  # 10 MB at a time, written (resident), to 300 MB
    chunks.append(bytearray(b"x" * (10 * 2**20)))
    print("held", 10 * len(chunks), "MB", flush=True)
    time.sleep(0.05)
print("never killed", flush=True)
"""


def test_a_job_past_its_memory_limit_fails_with_that_reason_and_is_not_retried(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    workers.start("m0", "", "--job-memory", "128M", cpu_slots=1)  # a box without GPUs
    assert "job limits: memory 128 MiB: " in workers.log("m0")  # how, said once
    work = tmp_path / "work"
    work.mkdir()
    (work / "grow.py").write_text(GROW)
    spec = write_spec(
        work,
        f"""
        name: hungry
        run: {sys.executable} grow.py
        recovery: {{max_error_restarts: 3}}
        """,
    )
    store = Store.open()
    run_id, run = _run_to_end(store, spec)
    assert run.state == "FAILED"
    assert run.reason.startswith("memory limit: the job used "), run.reason
    assert run.reason.endswith("over its 128 MiB limit (corral worker --job-memory)")
    assert len(store.attempts(run_id)) == 1  # not retried, whatever max_error_restarts says
    assert any("memory limit" in e.reason for e in store.events(run_id, types=["run.state"]))
    attempts = AttemptStore(connect(pool), Keys(pool.name))
    rec = attempts.get(f"{run_id}-a1")
    assert rec is not None and rec.state == "failed" and rec.detail == rec.limit
    assert "memory limit" in _cli("status", run_id).stdout
    logs = "".join(p.read_text() for p in (tmp_path / "machines").rglob("*.log"))
    assert "held 10 MB" in logs and "never killed" not in logs


def test_job_cpus_pin_the_job_to_its_workers_cores(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    workers.start("m0", "", "--job-cpus", "1", cpu_slots=1)
    out = tmp_path / "affinity.txt"
    work = tmp_path / "work"
    work.mkdir()
    (work / "where.py").write_text(WHERE)
    spec = write_spec(
        work,
        f"""
        name: pinned
        run: {sys.executable} {work / "where.py"} > {out}
        """,
    )
    store = Store.open()
    _, run = _run_to_end(store, spec)
    assert run.state == "SUCCEEDED", run.reason
    seen = json.loads(out.read_text())
    # its agent was the worker's warm one (started before the run came), put under the
    # limits when it was given the attempt: the job inherits them
    assert ": warm agent " in workers.log("m0"), workers.log("m0")
    if Mechanism.detect().cgroup_base is None:  # this box: no delegated cgroup v2
        assert seen["cores"] == cores_for(0, 1.0)
        wait_until(lambda: "CPU by affinity to cores" in workers.log("m0"), 10, 0.1)
    else:  # a box with one: the attempt's cgroup has the quota of one CPU
        assert seen["cpu_max"] == ["100000", "100000"]


#: what the job sees of its CPUs: its cores and its cgroup v2 path
WHERE = """
import json, os
from corral.queue.cgroups import mount_point
cgroup = next((ln[3:] for ln in open("/proc/self/cgroup").read().splitlines()
               if ln.startswith("0::")), "")
mount = mount_point()
cpu_max = mount / cgroup.lstrip("/") / "cpu.max" if mount else None
quota = cpu_max.read_text().split() if cpu_max and cpu_max.exists() else None
print(json.dumps({"cores": sorted(os.sched_getaffinity(0)), "cpu_max": quota}))
"""


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--job-memory", "16X"], "--job-memory: '16X' is not a size (e.g. 16G, 512M)"),
        (["--job-cpus", "lots"], "--job-cpus: 'lots' is not a number of CPUs (e.g. 4, 0.5)"),
        (["--job-cpus", "0"], "--job-cpus: '0' is not a number of CPUs (e.g. 4, 0.5)"),
        (["--job-cpus", "100000"], "--job-cpus: 100000 is more than the"),
        (["--cpu-slots", "-1"], "--cpu-slots must be 0 or more"),
        (["--gpus", ""], "no GPU found on this machine"),
    ],
)
def test_bad_limit_options_are_one_line_each(
    pool: PoolSettings, args: list[str], line: str
) -> None:
    done = _cli("worker", *args)
    assert done.returncode == 2
    [said] = done.stderr.strip().splitlines()
    assert line in said
