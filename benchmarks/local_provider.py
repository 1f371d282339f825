"""The local provider with many agents on the machine: what asking for offers, a machine's
status and a teardown cost the calling process (the controller).

    python benchmarks/local_provider.py [--json] [--agents 20] [--baseline-src PATH]

Launches N agents (``run: sleep 120``, one fake GPU each) through ``LocalProvider``, then
times ``offers()`` and ``status()`` (median ms over 20 calls) and tears every instance down,
noting this process's CPU seconds per teardown and the threads it holds. With
``--baseline-src`` the same is measured in a child process on another tree's ``src`` (the
tree before this change, say: ``git worktree add /tmp/base <commit>``), in the same run.
JSON keys: ``offers_ms``, ``status_ms``, ``teardown_cpu_s``, ``threads_with_agents`` (and
``baseline_`` + each).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def measure(n: int) -> dict[str, float]:
    from corral.gpu import parse_fake
    from corral.providers.base import Bootstrap, InstanceState, Requirements
    from corral.providers.local import LocalProvider
    from corral.wire.plan import AgentPlan

    tmp = Path(tempfile.mkdtemp(prefix="corral-localbench-"))
    os.environ["CORRAL_HOME"] = str(tmp / "home")
    os.environ["CORRAL_GPU_LOCK_DIR"] = str(tmp / "locks")
    work = tmp / "work"
    work.mkdir()
    p = LocalProvider(home=tmp / "home", gpus=parse_fake(f"L40S:{n + 1}"))
    req = Requirements(gpu_count_min=1, gpu_count_max=1)
    insts = []
    for i in range(n):
        plan = AgentPlan.model_validate(
            {
                "run_id": f"bench-{i}",
                "attempt": 1,
                "workdir": str(work),
                "checkpoint_dir": str(tmp / f"ckpt{i}"),
                "state_dir": str(tmp / f"state{i}"),
                "devices": [],
                "grace_seconds": 1.0,
                "stages": [{"name": "main", "run": "sleep 120"}],
            }
        )
        boot = Bootstrap(plan=plan, token="bench-token-0123456789")
        insts.append(p.launch(p.offers(req)[0], boot, f"bench{i}-a1"))
    deadline = time.monotonic() + 120
    for inst in insts:
        while p.status(inst).state != InstanceState.RUNNING:
            if time.monotonic() > deadline:
                raise SystemExit("the agents did not start")
            time.sleep(0.1)
    time.sleep(1.0)
    threads = threading.active_count()

    def timed(call) -> float:
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    offers_ms = timed(lambda: p.offers(req))
    status_ms = timed(lambda: p.status(insts[0]))
    cpu0 = time.process_time()
    for inst in insts:
        p.terminate(inst)
    teardown_cpu = (time.process_time() - cpu0) / n
    return {
        "offers_ms": round(offers_ms, 2),
        "status_ms": round(status_ms, 3),
        "teardown_cpu_s": round(teardown_cpu, 4),
        "threads_with_agents": threads,
        "agents": n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--baseline-src", type=Path, help="measure this src tree too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.agents)))
        return 0
    result = measure(args.agents)
    if args.baseline_src:
        env = dict(os.environ, PYTHONPATH=str(args.baseline_src))
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--agents", str(args.agents)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        base = json.loads(out.stdout.strip().splitlines()[-1])
        result.update({f"baseline_{k}": v for k, v in base.items() if k != "agents"})
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"local provider, {result['agents']} agents running on the machine")
    for key, label in (
        ("offers_ms", "offers() ms"),
        ("status_ms", "status() ms"),
        ("teardown_cpu_s", "CPU s of the caller per teardown"),
        ("threads_with_agents", "threads of the caller"),
    ):
        base = result.get(f"baseline_{key}")
        print(
            f"  {label:36} {result[key]:>10}" + (f"   baseline {base}" if base is not None else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
