"""Per-request latency of the agent's HTTP API, from a client on the same machine.

    python benchmarks/agent_latency.py [--json] [--requests 200]

Starts an agent in this process (a ``sleep`` job), then times ``GET /status``, ``/events``
and ``/logs`` over one kept-alive ``httpx.Client`` (the controller's way of calling it).
Figures: median and p95 milliseconds per request. A delayed-ACK stall (headers and body sent
in two small writes without ``TCP_NODELAY``) shows as about 40 ms per request.
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
        finally:
            agent.close(timeout=10)
    times.sort()
    return {
        "request_ms_median": round(statistics.median(times) * 1000, 2),
        "request_ms_p95": round(times[int(len(times) * 0.95) - 1] * 1000, 2),
        "requests": requests,
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


if __name__ == "__main__":
    main()
