"""The GPU worker pool: start latency through the pool against the local provider, and the
throughput of two workers with the controller's CPU per run.

    python benchmarks/pool.py [--json] [--repeat 5] [--runs 200]

1. ``pool_start_s`` / ``local_start_s``: ``corral launch --detach`` of a one-GPU job to the
   first line of its code, through the pool (two idle ``corral worker`` machines, one fake
   L40S each) and on the local provider (the same fake GPU inventory), interleaved, median of
   --repeat. The pool's extra hop is the broker (Redis) and a worker's forked task process.
2. ``pool_runs_per_min`` / ``controller_cpu_s_per_run``: --runs tiny runs (``true``) queued
   at once through the service (each first attempt enqueued, as ``corral launch`` does) and
   run by the two workers under one real controller process (default settings); from the
   first submission to the last run SUCCEEDED, and the controller process's CPU seconds
   (user + system) over the same span, per run.
3. ``scale_s``: ``corral pool scale 4`` on a box whose ``corral worker`` runs 1 of its 4
   workers (fake L40S), from the command's start to all four answering in the pool (the
   command returns then); baseline ``cold_start_s``: a new ``corral worker`` of the same four
   GPUs from its start to all four answering, in the same run.
4. ``cpu_start_s``: the same launch of a job that asks for no GPU, through the CPU worker one
   of the two machines also runs (``corral worker --cpu-slots 1``), interleaved with the others;
   baseline: the GPU job's ``pool_start_s``.
5. ``gpu_history_kb_per_gpu_day``: what the store's GPU history costs (``corral.store.
   gpu_history``): a day of readings of --history-gpus GPUs at the default rate (one a minute,
   ``CORRAL_GPU_HISTORY_EVERY``), written through the store's API as the controller's sampler
   writes them (one transaction per minute) into a fresh SQLite store; the database's growth
   (``page_count * page_size`` before and after), in KiB per GPU per day. Target: < 500.

Needs the Redis server of ``CORRAL_BENCH_REDIS`` (default ``redis://127.0.0.1:6379/13``); every
key of the benchmark's pool is deleted at the end. ``--gpu-history-only`` measures 5 alone (no
Redis, a few seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

FIRST_LINE = """\
import sys, time
t = time.time()
print("first line", flush=True)
open(sys.argv[1], "w").write(repr(t))
"""
REDIS = os.environ.get("CORRAL_BENCH_REDIS", "redis://127.0.0.1:6379/13")


def _wait(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise SystemExit(f"timed out waiting for {what}")


def _first_line(path: Path) -> float | None:
    try:
        text = path.read_text()
        return float(text) if text else None
    except (OSError, ValueError):
        return None


def launch_to_first_line(work: Path, env: dict[str, str], tag: str, gpus: int = 1) -> float:
    out = work / f"{tag}.txt"
    spec = work / f"{tag}.yaml"
    asks = f"resources: {{gpus: {gpus}}}\n" if gpus else ""
    spec.write_text(f"name: {tag}\n{asks}run: {sys.executable} first_line.py {out}\n")
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-m", "corral.cli", "launch", str(spec), "--detach"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        cwd=work,
    )
    return float(_wait(lambda: _first_line(out), 60, f"the first line of {tag}")) - t0


def start_workers(env: dict[str, str], root: Path) -> list[subprocess.Popen[bytes]]:
    from corral.queue.client import connect
    from corral.queue.keys import Keys
    from corral.queue.registry import Registry
    from corral.queue.settings import PoolSettings

    procs = []
    for gpu in ("0", "1"):
        home = root / f"machine{gpu}"
        home.mkdir(parents=True)
        wenv = dict(env, CORRAL_HOME=str(home))
        with open(home / "worker.out", "ab") as log:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "corral.cli",
                        "worker",
                        "--gpus",
                        gpu,
                        "--name",
                        f"m{gpu}",
                        *(["--cpu-slots", "1"] if gpu == "0" else []),
                    ],
                    env=wenv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    settings = PoolSettings.from_env(env)
    registry = Registry(connect(settings), Keys(settings.name))
    _wait(lambda: len(registry.workers()) == 3, 120, "two GPU workers and a CPU one to join")
    return procs


def _box(env: dict[str, str], root: Path, *extra: str) -> subprocess.Popen[bytes]:
    root.mkdir(parents=True, exist_ok=True)
    wenv = dict(env, CORRAL_HOME=str(root), CORRAL_FAKE_GPUS="L40S:4")
    wenv["CORRAL_GPU_LOCK_DIR"] = str(root / "locks")
    with open(root / "worker.out", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "corral.cli", "worker", "--gpus", "0,1,2,3", *extra],
            env=wenv,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def scale_times(env: dict[str, str], root: Path) -> tuple[float, float]:
    """(seconds for ``corral pool scale 4`` from 1 worker, a cold start of 4 workers)."""
    from corral.queue.client import connect
    from corral.queue.keys import Keys
    from corral.queue.registry import Registry
    from corral.queue.settings import PoolSettings

    registry = Registry(connect(PoolSettings.from_env(env)), Keys(env["CORRAL_POOL_NAME"]))

    def answering(prefix: str) -> int:
        return sum(1 for w in registry.workers() if w.name.startswith(prefix))

    box = _box(env, root / "scale", "--workers", "1", "--name", "sc")
    try:
        _wait(lambda: answering("sc-") == 1, 120, "one worker to answer")
        began = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "corral.cli", "pool", "scale", "4"],
            env=dict(env, CORRAL_HOME=str(root / "scale")),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        scale_s = time.monotonic() - began
        if answering("sc-") != 4:
            raise SystemExit("scale 4 returned before four workers answered")
    finally:
        os.killpg(box.pid, signal.SIGKILL)
    began = time.monotonic()
    box = _box(env, root / "cold", "--name", "cold")
    try:
        _wait(lambda: answering("cold-") == 4, 120, "four workers to answer")
        cold_s = time.monotonic() - began
    finally:
        os.killpg(box.pid, signal.SIGKILL)
    return scale_s, cold_s


def throughput(env: dict[str, str], work: Path, runs: int) -> tuple[float, float]:
    """(runs per minute, controller CPU seconds per run)."""
    for k, v in env.items():
        os.environ[k] = v
    from corral.service.submit import submit_run
    from corral.store import Store

    spec = work / "tiny.yaml"
    spec.write_text("name: tiny\nresources: {gpus: 1}\nrun: 'true'\n")
    home = Path(env["CORRAL_HOME"])
    with open(home / "bench-controller.log", "ab") as log:
        ctl = subprocess.Popen(
            [sys.executable, "-m", "corral.control", "--idle-exit", "600"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        proc = psutil.Process(ctl.pid)
        store = Store.open()
        time.sleep(2.0)  # the controller is up and idle
        cpu0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        ids = [submit_run(spec, store=store, start_controller=False).run.id for _ in range(runs)]

        def done() -> bool:
            states = {r.id: r.state for r in store.list_runs()}
            bad = [i for i in ids if states.get(i) in ("FAILED", "CANCELLED", "STOPPED")]
            if bad:
                raise SystemExit(f"run {bad[0]} did not succeed: {store.get_run(bad[0]).reason}")
            return all(states.get(i) == "SUCCEEDED" for i in ids)

        _wait(done, 3600, f"{runs} runs to succeed")
        elapsed = time.monotonic() - t0
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        return runs / elapsed * 60.0, cpu / runs
    finally:
        ctl.send_signal(signal.SIGTERM)
        try:
            ctl.wait(30)
        except subprocess.TimeoutExpired:
            ctl.kill()


def gpu_history_kb_per_gpu_day(gpus: int = 4) -> float:
    """KiB the store grows by per GPU per day of readings at the default interval."""
    import random
    import sqlite3
    from datetime import UTC, datetime, timedelta

    from corral.control.context import Settings
    from corral.store import Store
    from corral.store.gpu_history import GpuReading

    every = int(Settings().gpu_history_every_s or 60)
    rng = random.Random(31)
    with tempfile.TemporaryDirectory(prefix="corral-bench-gpu-history-") as tmp:
        path = Path(tmp) / "corral.db"

        def size() -> int:
            conn = sqlite3.connect(path)
            try:
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                return int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0])
            finally:
                conn.close()

        with Store.open(f"sqlite:///{path}") as store:
            before = size()
            t0 = datetime(2026, 1, 1, tzinfo=UTC)
            for i in range(86400 // every):
                readings = [
                    GpuReading(
                        kind="host",
                        source="bench-host",
                        attempt=0,
                        gpu=g,
                        uuid=f"GPU-{g:08d}-0000-0000-0000-000000000000",
                        name="L40S",
                        memory_total_mb=46068,
                        util_pct=rng.uniform(0, 100),
                        mem_used_mb=rng.uniform(0, 46068),
                        temp_c=rng.uniform(30, 85),
                    )
                    for g in range(gpus)
                ]
                at = t0 + timedelta(seconds=i * every)
                if store.record_gpu_readings(readings, at=at, every_s=every) != gpus:
                    raise SystemExit(f"the readings of minute {i} were not all written")
            after = size()
    return (after - before) / 1024 / gpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeat", type=int, default=5, help="launches per start figure")
    parser.add_argument("--runs", type=int, default=200, help="runs for the throughput figure")
    parser.add_argument(
        "--history-gpus", type=int, default=4, help="GPUs whose day of readings is written"
    )
    parser.add_argument(
        "--gpu-history-only",
        action="store_true",
        help="measure the GPU history's store size alone (no Redis, no workers)",
    )
    args = parser.parse_args(argv)
    history_kb = round(gpu_history_kb_per_gpu_day(args.history_gpus), 1)
    if args.gpu_history_only:
        return _report({"gpu_history_kb_per_gpu_day": history_kb}, args, None)

    tmp = Path(tempfile.mkdtemp(prefix="corral-bench-pool-"))
    pool = f"bench{uuid.uuid4().hex[:8]}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    base.update(CORRAL_FAKE_GPUS="L40S:2", CORRAL_CONTROLLER_IDLE_EXIT="60")
    pool_env = dict(
        base,
        CORRAL_POOL_BROKER=REDIS,
        CORRAL_POOL_NAME=pool,
        CORRAL_PROVIDERS="pool",
        CORRAL_GPU_LOCK_DIR=str(tmp / "pool-locks"),
        CORRAL_HOME=str(tmp / "pool-home"),
    )
    local_env = dict(
        base,
        CORRAL_PROVIDERS="local",
        CORRAL_GPU_LOCK_DIR=str(tmp / "local-locks"),
        CORRAL_HOME=str(tmp / "local-home"),
    )
    workers: list[subprocess.Popen[bytes]] = []
    try:
        work = tmp / "work"
        work.mkdir()
        (work / "first_line.py").write_text(FIRST_LINE)
        workers = start_workers(pool_env, tmp / "machines")
        pool_s, local_s, cpu_s = [], [], []
        for i in range(args.repeat):
            pool_s.append(launch_to_first_line(work, pool_env, f"pool-{i}"))
            local_s.append(launch_to_first_line(work, local_env, f"local-{i}"))
            cpu_s.append(launch_to_first_line(work, pool_env, f"cpu-{i}", gpus=0))
            time.sleep(1.5)  # both runs end and free their GPU before the next pair
        for env in (pool_env, local_env):
            subprocess.run(
                [sys.executable, "-m", "corral.cli", "controller", "stop"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        tput_env = dict(pool_env, CORRAL_HOME=str(tmp / "tput-home"))
        Path(tput_env["CORRAL_HOME"]).mkdir()
        per_min, cpu_per_run = throughput(tput_env, work, args.runs)
        for w in workers:  # their GPU locks and their CPU are the box's below
            os.killpg(w.pid, signal.SIGKILL)
        workers = []
        scale_s, cold_s = scale_times(pool_env, tmp / "boxes")
    finally:
        for w in workers:
            try:
                os.killpg(w.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        from corral.queue.client import connect
        from corral.queue.settings import PoolSettings

        client = connect(PoolSettings(broker_url=REDIS, name=pool))
        names = list(client.scan_iter(match=f"{pool}*", count=1000))
        if names:
            client.delete(*names)
        shutil.rmtree(tmp, ignore_errors=True)

    result = {
        "pool_start_s": round(statistics.median(pool_s), 4),
        "local_start_s": round(statistics.median(local_s), 4),
        "cpu_start_s": round(statistics.median(cpu_s), 4),
        "pool_runs_per_min": round(per_min, 1),
        "controller_cpu_s_per_run": round(cpu_per_run, 4),
        "runs": args.runs,
        "scale_s": round(scale_s, 2),
        "cold_start_s": round(cold_s, 2),
        "gpu_history_kb_per_gpu_day": history_kb,
    }
    return _report(result, args, cpu_per_run)


def _report(result: dict, args: argparse.Namespace, cpu_per_run: float | None) -> int:
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    title = f"the pool (start: median of {args.repeat}; throughput: {args.runs} runs)"
    t = Table(title=title if cpu_per_run is not None else "the GPU history's store size")
    for col in ("figure", "pool", "baseline"):
        t.add_column(col)
    if cpu_per_run is not None:
        t.add_row(
            "launch -> first line of user code",
            f"{result['pool_start_s']:.3f} s",
            f"local provider {result['local_start_s']:.3f} s",
        )
        per_min = result["pool_runs_per_min"]
        t.add_row("tiny runs through two workers", f"{per_min:.1f} runs/min", "-")
        t.add_row("controller CPU per run", f"{cpu_per_run * 1000:.0f} ms", "-")
        t.add_row(
            "corral pool scale 1 -> 4, all answering",
            f"{result['scale_s']:.2f} s",
            f"a cold start of 4 workers {result['cold_start_s']:.2f} s",
        )
        t.add_row(
            "CPU job: launch -> first line (a CPU worker)",
            f"{result['cpu_start_s']:.3f} s",
            f"a GPU job through the pool {result['pool_start_s']:.3f} s",
        )
    t.add_row(
        f"GPU history: store per GPU per day ({args.history_gpus} GPUs, one reading a minute)",
        f"{result['gpu_history_kb_per_gpu_day']:.1f} KiB",
        "target < 500 KiB",
    )
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
