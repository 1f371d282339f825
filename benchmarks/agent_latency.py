"""Per-request latency of the agent's HTTP API, from a client on the same machine.

    python benchmarks/agent_latency.py [--json] [--requests 200]

Starts an agent in this process (a ``sleep`` job), then times ``GET /status``, ``/events``
and ``/logs`` over one kept-alive ``httpx.Client`` (the controller's way of calling it).
Figures: median and p95 milliseconds per request. A delayed-ACK stall (headers and body sent
in two small writes without ``TCP_NODELAY``) shows as about 40 ms per request.

Then one controller look at a running run through the controller's own client
(``AgentClient``: parsed, typed): ``GET /poll`` (status, events after the cursor and every
stage log's new bytes in one request) on the controller's pool (``http.client``) and on an
``httpx`` pool, against the way before it, ``/status`` + ``/events`` + ``/logs`` (sizes, on
httpx), all on the same agent in the same run. JSON keys ``look_ms_poll``,
``look_ms_poll_httpx``, ``look_ms_before_poll`` (medians), ``request_ms_median``,
``request_ms_p95``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from corral.agent.main import Agent
from corral.control.agent_client import AgentClient, AgentPool
from corral.wire.plan import AgentPlan

TOKEN = "bench-token-0123456789"
PATHS = ("/status", "/events?after=0", "/logs")


def _plan(root: Path) -> AgentPlan:
    work = root / "work"
    work.mkdir()
    return AgentPlan.model_validate(
        {
            "run_id": "bench-1",
            "attempt": 1,
            "workdir": str(work),
            "checkpoint_dir": str(root / "ckpt"),
            "state_dir": str(root / "state"),
            "devices": [],
            "grace_seconds": 0.5,
            "stages": [{"name": "main", "run": "sleep 60"}],
        }
    )


def measure(requests: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        agent = Agent(_plan(Path(tmp)), TOKEN)
        url = agent.start()
        try:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(timeout=5.0, headers=headers) as client:
                client.get(url + "/status").raise_for_status()  # connect, warm up
                times: list[float] = []
                for i in range(requests):
                    t0 = time.perf_counter()
                    client.get(url + PATHS[i % len(PATHS)]).raise_for_status()
                    times.append(time.perf_counter() - t0)
            looks = _looks(url, requests)
        finally:
            agent.close(timeout=10)
    times.sort()
    return {
        "request_ms_median": round(statistics.median(times) * 1000, 2),
        "request_ms_p95": round(times[int(len(times) * 0.95) - 1] * 1000, 2),
        "requests": requests,
        **looks,
    }


def _looks(url: str, n: int) -> dict[str, float]:
    """Median ms of one look at the run through the controller's client: ``/poll`` on its
    default pool (``http.client``, kept alive) and on an ``httpx`` pool, against ``/status``
    + ``/events`` + ``/logs`` (httpx: the client before ``/poll``), in alternating blocks
    (the same agent, the same moments)."""
    pool = AgentPool()
    lean = pool.client(url, TOKEN)
    with httpx.Client(timeout=5.0) as http:
        client = AgentClient(url, TOKEN, client=http)
        client.status()
        lean.status()
        poll: list[float] = []
        poll_httpx: list[float] = []
        before: list[float] = []

        def old_look() -> None:
            client.status()
            client.events(after=0)
            client.log_sizes()

        for _ in range(5):  # rounds of blocks: each way on its own connection, drift shared
            for out, look in (
                (poll, lambda: lean.poll(0, {})),
                (poll_httpx, lambda: client.poll(0, {})),
                (before, old_look),
            ):
                for _ in range(max(1, n // 5)):
                    t0 = time.perf_counter()
                    look()
                    out.append(time.perf_counter() - t0)
    pool.close()
    return {
        "look_ms_poll": round(statistics.median(poll) * 1000, 2),
        "look_ms_poll_httpx": round(statistics.median(poll_httpx) * 1000, 2),
        "look_ms_before_poll": round(statistics.median(before) * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    result = measure(args.requests)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"agent request latency over {result['requests']} requests (one kept-alive client)")
        print(
            f"  median {result['request_ms_median']:.2f} ms   p95 {result['request_ms_p95']:.2f} ms"
        )
        print(
            f"one look at a running run: GET /poll {result['look_ms_poll']:.2f} ms "
            f"(httpx {result['look_ms_poll_httpx']:.2f} ms); "
            f"/status + /events + /logs {result['look_ms_before_poll']:.2f} ms (medians)"
        )


if __name__ == "__main__":
    main()
