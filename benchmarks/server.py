"""``corral server`` under load: listing runs with a long history, and many clients following
one run's logs over server-sent events.

    python benchmarks/server.py [--json] [--history 10000] [--requests 300] [--clients 50]
                                [--window 10]

1. **Listing.** A store with --history ended runs; the server in its own process (uvicorn on
   the ASGI factory, no controller); --requests sequential ``GET /api/v1/runs`` (the default
   page of 50, newest first) over one kept-alive connection: p50 and p99. Baselines measured
   in the same run: ``GET /healthz`` on the same server (the HTTP floor) and the service call
   itself in this process (``service.runs.list_runs(limit=50)``: the work behind the endpoint).
2. **Following logs.** A fresh home, ``corral server`` (which starts the controller), and a run
   that prints 100 lines a second. Then 1 client (the baseline) and --clients clients follow
   its logs (``GET /api/v1/runs/{id}/logs/stream?from_end=true``) for --window seconds each:
   the log events delivered per second (all clients together) and the server process's CPU
   (user + system, percent of one core) in all and per client.

JSON keys: ``runs_p50_ms``, ``runs_p99_ms``, ``healthz_p50_ms``, ``healthz_p99_ms``,
``service_list_p50_ms``, ``service_list_p99_ms``, ``sse_clients_1_events_per_s``,
``sse_clients_1_cpu_pct``, ``sse_clients_<N>_events_per_s``, ``sse_clients_<N>_cpu_pct``
(per client), ``sse_clients_<N>_server_cpu_pct`` (all), ``job_lines_per_s``.
Target (issue #15): ``runs_p99_ms`` under 100 ms with 10,000 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

TARGET_RUNS_P99_MS = 100.0
LINES_PER_S = 100
JOB = """\
name: chatty
run: python -u -c "import time; [(print('line', i, 'of the log of a chatty job'), time.sleep(0.01)) for i in range(100000)]"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode})")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not come up")


def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ, CORRAL_HOME=str(home), CORRAL_CONTROLLER_IDLE_EXIT="30")
    env.pop("CORRAL_DATABASE_URL", None)
    return env


def token_for(home: Path) -> str:
    os.environ["CORRAL_HOME"] = str(home)
    from corral.service.tokens import create_token

    return create_token(f"bench-{os.getpid()}-{time.monotonic_ns()}").token


# --- 1. listing runs --------------------------------------------------------------------------


def fill_history(home: Path, n: int, workdir: Path) -> None:
    """``n`` ended runs (created through the store, then marked SUCCEEDED in one statement)."""
    os.environ["CORRAL_HOME"] = str(home)
    from corral.store import Store

    store = Store.open()
    spec = {"name": "history", "run": "true", "workdir": str(workdir)}
    try:
        for i in range(n):
            store.create_run(
                name=f"history-{i % 100}",
                spec=spec,
                spec_hash="0" * 64,
                spec_path=str(workdir / "corral.yaml"),
                workdir=str(workdir),
            )
    finally:
        store.close()
    db = sqlite3.connect(home / "corral.db")
    with db:
        db.execute(
            "UPDATE runs SET state = 'SUCCEEDED', reason = 'all stages succeeded', "
            "finished_at = created_at, started_at = created_at, cost_usd = 0.01"
        )
    db.close()


def timed_gets(client: httpx.Client, path: str, n: int) -> list[float]:
    client.get(path).raise_for_status()  # warm
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        res = client.get(path)
        out.append((time.perf_counter() - t0) * 1000)
        res.raise_for_status()
    return out


def measure_listing(tmp: Path, history: int, requests: int) -> dict[str, float]:
    home = tmp / "list-home"
    home.mkdir()
    fill_history(home, history, tmp)
    from corral.service.runs import list_runs
    from corral.service.session import open_store

    store = open_store()
    try:
        list_runs(limit=50, store=store)
        service_ms = []
        for _ in range(requests):
            t0 = time.perf_counter()
            found = list_runs(limit=50, store=store)
            [r.to_json() for r in found]
            service_ms.append((time.perf_counter() - t0) * 1000)
    finally:
        store.close()
    token = token_for(home)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "uvicorn", "corral.server.app:create_app", "--factory"]
    cmd += ["--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env_for(home))
    try:
        wait_healthy(url, proc)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            listed = c.get("/api/v1/runs").json()
            assert len(listed["runs"]) == 50 and listed["total"] == history, listed["total"]
            runs_ms = timed_gets(c, "/api/v1/runs", requests)
            health_ms = timed_gets(c, "/healthz", requests)
    finally:
        proc.terminate()
        proc.wait(10)
    return {
        "runs_p50_ms": round(statistics.median(runs_ms), 2),
        "runs_p99_ms": round(percentile(runs_ms, 99), 2),
        "healthz_p50_ms": round(statistics.median(health_ms), 2),
        "healthz_p99_ms": round(percentile(health_ms, 99), 2),
        "service_list_p50_ms": round(statistics.median(service_ms), 2),
        "service_list_p99_ms": round(percentile(service_ms, 99), 2),
    }


# --- 2. following logs ------------------------------------------------------------------------


async def follow_for(url: str, token: str, run_id: str, clients: int, window: float) -> int:
    """Log events that ``clients`` followers received in ``window`` seconds, together."""
    received = [0] * clients
    started = asyncio.Event()
    ready = [0]

    async def one(i: int, client: httpx.AsyncClient) -> None:
        path = f"/api/v1/runs/{run_id}/logs/stream"
        async with client.stream("GET", path, params={"from_end": "true"}) as res:
            res.raise_for_status()
            ready[0] += 1
            if ready[0] == clients:
                started.set()
            async for line in res.aiter_lines():
                if line.startswith("event: log") and started.is_set():
                    received[i] += 1

    limits = httpx.Limits(max_connections=clients + 5)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=60, limits=limits
    ) as client:
        tasks = [asyncio.create_task(one(i, client)) for i in range(clients)]
        await asyncio.wait_for(started.wait(), 60)
        await asyncio.sleep(window)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return sum(received)


def measure_following(tmp: Path, clients: int, window: float) -> dict[str, float]:
    home = tmp / "sse-home"
    home.mkdir()
    work = tmp / "sse-work"
    work.mkdir()
    (work / "corral.yaml").write_text(JOB)
    token = token_for(home)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = env_for(home)
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral.cli", "server", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, float] = {}
    try:
        wait_healthy(url, proc)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            res = c.post("/api/v1/runs", json={"spec": JOB, "base_dir": str(work)})
            res.raise_for_status()
            run_id = res.json()["run"]["id"]
            deadline = time.monotonic() + 60
            while c.get(f"/api/v1/runs/{run_id}").json()["state"] != "RUNNING":
                if time.monotonic() > deadline:
                    raise RuntimeError("the run did not start")
                time.sleep(0.2)
            time.sleep(2)  # the controller copies logs steadily
            server = psutil.Process(proc.pid)
            for n in sorted({1, clients}):
                before = server.cpu_times()
                t0 = time.perf_counter()
                events = asyncio.run(follow_for(url, token, run_id, n, window))
                wall = time.perf_counter() - t0
                after = server.cpu_times()
                cpu = (after.user - before.user + after.system - before.system) / wall * 100
                out[f"sse_clients_{n}_events_per_s"] = round(events / window, 1)
                out[f"sse_clients_{n}_server_cpu_pct"] = round(cpu, 1)
                out[f"sse_clients_{n}_cpu_pct"] = round(cpu / n, 2)
            files = c.get(f"/api/v1/runs/{run_id}/logs").json()["files"]
            c.post(f"/api/v1/runs/{run_id}/cancel")
        out["job_lines_per_s"] = LINES_PER_S
        out["_log_bytes"] = sum(f["size"] for f in files)
    finally:
        proc.terminate()
        proc.wait(10)
        subprocess.run(
            [sys.executable, "-m", "corral.cli", "controller", "stop"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--history", type=int, default=10000, help="runs in the store")
    parser.add_argument("--requests", type=int, default=300, help="timed GETs per figure")
    parser.add_argument("--clients", type=int, default=50, help="log followers")
    parser.add_argument("--window", type=float, default=10.0, help="seconds each follow lasts")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="corral-server-bench-"))
    try:
        result: dict[str, Any] = measure_listing(tmp, args.history, args.requests)
        result.update(measure_following(tmp, args.clients, args.window))
        result.pop("_log_bytes", None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    n = args.clients
    t = Table(title=f"corral server ({args.history:,} runs in the store; {n} log followers)")
    for col in ("figure", "value", "baseline (same run)", "target", "ok"):
        t.add_column(col)
    ok = result["runs_p99_ms"] < TARGET_RUNS_P99_MS
    t.add_row(
        "GET /api/v1/runs p50 / p99",
        f"{result['runs_p50_ms']:.1f} / {result['runs_p99_ms']:.1f} ms",
        f"healthz {result['healthz_p50_ms']:.1f} / {result['healthz_p99_ms']:.1f} ms; "
        f"service call {result['service_list_p50_ms']:.1f} / {result['service_list_p99_ms']:.1f} ms",
        f"p99 < {TARGET_RUNS_P99_MS:g} ms",
        "yes" if ok else "NO",
    )
    t.add_row(
        f"{n} clients following one run's logs",
        f"{result[f'sse_clients_{n}_events_per_s']:,.0f} events/s, "
        f"{result[f'sse_clients_{n}_cpu_pct']:.2f}% CPU per client "
        f"({result[f'sse_clients_{n}_server_cpu_pct']:.0f}% in all)",
        f"1 client: {result['sse_clients_1_events_per_s']:,.0f} events/s, "
        f"{result['sse_clients_1_cpu_pct']:.1f}% CPU",
        f"job writes {LINES_PER_S} lines/s",
        "-",
    )
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
