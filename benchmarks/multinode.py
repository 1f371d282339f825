"""Multi-node runs on the simulated cloud: how long a gang takes to train, to train again after
a node is lost, and what waiting for its last node costs.

    python benchmarks/multinode.py [--json] [--nodes 2,4] [--launch-delay 0.5]

For each gang size N, in one run on the fake cloud (each node its own machine, a real agent, an
unmodified ``torchrun`` job of N ranks on gloo over loopback, one per node):

- ``gang_start_s_N``: ``corral launch`` to every rank training (its first all-reduced step),
  against ``single_start_s``: the same job on one node (the named baseline, same run). Both
  are warm: an untimed warm-up launch of the job on one node comes first (trained, then
  cancelled), so the controller is up and the imports are cached before any figure is taken,
  not during the baseline only; each run is over (``corral cancel --wait``) before the next
  timed launch, so no launch is timed while another run's machines are torn down;
- ``repair_s_N``: one node preempted (node 1: the head survives) to every rank training again
  on the repaired gang (the survivors kept, the lost node replaced), against ``relaunch_s_N``:
  the same with ``CORRAL_GANG_REPAIR=off`` (the whole gang relaunched, as its peers do);
- ``idle_node_hours_N``: node-hours billed while the gang waited for its last node (each node
  from its launch until every rank trained);
- ``bound_node_s``: a gang that cannot form (its machines boot after ``CORRAL_GANG_TIMEOUT``,
  3 s here) is released: the longest a node of it was billed, against the bound.

Targets (issue #29): ``gang_start_s`` at most 1.5x ``single_start_s``; ``repair_s`` below
``relaunch_s``; no node billed for more than the bound (and its teardown) while waiting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import gang_trace

if TYPE_CHECKING:
    from corral.store import Store

JOB = """\
import time
began = time.time()
import datetime, os, sys
import torch, torch.distributed as dist
from corral.sdk import install_signal_handlers, should_stop_all
imported = time.time()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
met = time.time()
rank = dist.get_rank()
install_signal_handlers()
marks = open(os.environ["MARKS"], "a", buffering=1)
attempt = os.environ["CORRAL_ATTEMPT"]
marks.write(f"{began:.6f} {attempt} {rank} worker\\n")
marks.write(f"{imported:.6f} {attempt} {rank} torch\\n")
marks.write(f"{met:.6f} {attempt} {rank} init\\n")
step = 0
while step < 100000:
    step += 1
    t = torch.ones(1)
    dist.all_reduce(t)
    marks.write(f"{time.time():.6f} {attempt} {rank} {step}\\n")
    if should_stop_all():
        dist.barrier()
        sys.exit(75)
    time.sleep(0.1)
"""

SPEC = """\
name: {name}
resources: {{nodes: {nodes}, providers: [fake]}}
env: {{OMP_NUM_THREADS: 1, MARKS: {marks}{extra}}}
run: torchrun --nproc-per-node 1 job.py
"""


def _cloud(delay: float, capacity: int) -> dict:
    return {
        "offers": [
            {"id": "cpu", "region": "r1", "gpu_count": 0, "cpus": 2, "memory_gb": 4,
             "on_demand_price": 1.0, "capacity": capacity},
        ],
        "launch_delay_s": delay,
        "notice_s": 10.0,
    }  # fmt: skip


class Bench:
    def __init__(self, root: Path, delay: float, capacity: int, trace: bool = False):
        self.root = root
        #: --trace: torchrun logs its rendezvous (LOGLEVEL=INFO), the CPU of every process of
        #: the benchmark is sampled, and each timed start is traced (``gang_trace``)
        self.meter = gang_trace.CpuMeter(str(root)).start() if trace else None
        self.traces: dict[str, dict] = {}
        self.env = {
            **os.environ,
            "CORRAL_HOME": str(root / "home"),
            "CORRAL_PROVIDERS": "fake",
            "CORRAL_FAKE_CLOUD": str(self.cloud_file(delay, capacity)),
            "CORRAL_DEFAULT_MAX_COST_USD": "none",
            "CORRAL_DEFAULT_IDLE_TIMEOUT": "none",
        }
        (root / "job.py").write_text(JOB)
        self.count = 0

    def cloud_file(self, delay: float, capacity: int) -> Path:
        path = self.root / f"cloud-{delay}-{capacity}.json"
        path.write_text(json.dumps(_cloud(delay, capacity)))
        return path

    def corral(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "corral.cli", *args],
            env=env or self.env,
            capture_output=True,
            text=True,
            cwd=self.root,
        )
        if done.returncode != 0:
            raise SystemExit(f"corral {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def launch(self, nodes: int, env: dict[str, str] | None = None) -> tuple[str, Path, float]:
        self.count += 1
        marks = self.root / f"marks-{self.count}.txt"
        marks.touch()
        spec = self.root / f"spec-{self.count}.yaml"
        extra = ", LOGLEVEL: INFO" if self.meter is not None else ""
        spec.write_text(
            SPEC.format(name=f"gang{self.count}", nodes=nodes, marks=marks, extra=extra)
        )
        began = time.time()
        out = self.corral("launch", str(spec), "--detach", "--json", env=env)
        return json.loads(out)["id"], marks, began

    def trace(self, label: str, run_id: str, nodes: int, began: float, marks: Path) -> None:
        """With --trace: where attempt 1 of ``run_id`` spent its start (its machines up)."""
        if self.meter is None:
            return
        self.meter.sample()
        trace = gang_trace.collect(
            Path(self.env["CORRAL_HOME"]), run_id, 1, nodes, began, marks, "main"
        )
        self.traces[label] = {
            "phases": trace.table(self.meter, os.cpu_count() or 1),
            "nodes": trace.per_node(),
        }

    def store(self) -> Store:
        """The store of this benchmark's home."""
        os.environ["CORRAL_HOME"] = self.env["CORRAL_HOME"]
        from corral.store import Store

        return Store.open()


def _marks(path: Path) -> list[tuple[float, int, int]]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3].isdigit():  # a step (the others: a rank's start)
            out.append((float(parts[0]), int(parts[1]), int(parts[2])))
    return out


def wait_training(marks: Path, ranks: int, attempt: int, timeout: float = 300) -> float:
    """When every rank of ``attempt`` had trained a step (the latest of their first marks)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        first: dict[int, float] = {}
        for ts, att, rank in _marks(marks):
            if att == attempt and rank not in first:
                first[rank] = ts
        if len(first) == ranks:
            return max(first.values())
        time.sleep(0.1)
    raise SystemExit(f"attempt {attempt}: not every one of {ranks} ranks trained in {timeout}s")


def preempt_node(bench: Bench, run_id: str, rank: int) -> float:
    from corral.providers.base import Instance
    from corral.providers.fake.provider import FakeProvider

    store = bench.store()
    (row,) = [
        r for r in store.resources(run_id=run_id) if r.attempt == 1 and r.data.get("rank") == rank
    ]
    began = time.time()
    FakeProvider(home=Path(bench.env["CORRAL_HOME"])).preempt(
        Instance.model_validate(row.instance), grace=10.0
    )
    return began


def idle_node_hours(bench: Bench, run_id: str, complete: float) -> float:
    store = bench.store()
    launched = [e.ts.timestamp() for e in store.events(run_id, types=["instance.launched"])]
    return sum(max(0.0, complete - t) for t in launched) / 3600


def warm(bench: Bench) -> None:
    """The untimed first launch: the controller started, the CLI's, the agent's and the job's
    imports read once, before the baseline and the gangs are timed alike."""
    run_id, marks, _ = bench.launch(1)
    wait_training(marks, 1, 1)
    bench.corral("cancel", run_id, "--wait")


def measure(bench: Bench, n: int, out: dict, starts_only: bool = False) -> None:
    run_id, marks, began = bench.launch(n)
    complete = wait_training(marks, n, 1)
    out[f"gang_start_s_{n}"] = round(complete - began, 2)
    bench.trace(f"gang_start_s_{n}", run_id, n, began, marks)
    if starts_only:
        bench.corral("cancel", run_id, "--wait")
        return
    out[f"idle_node_hours_{n}"] = round(idle_node_hours(bench, run_id, complete), 6)
    t0 = preempt_node(bench, run_id, 1)
    out[f"repair_s_{n}"] = round(wait_training(marks, n, 2) - t0, 2)
    bench.corral("cancel", run_id, "--wait")
    off = {**bench.env, "CORRAL_GANG_REPAIR": "off"}
    run_id, marks, _ = bench.launch(n, env=off)
    wait_training(marks, n, 1)
    t0 = preempt_node(bench, run_id, 1)
    out[f"relaunch_s_{n}"] = round(wait_training(marks, n, 2) - t0, 2)
    bench.corral("cancel", run_id, "--wait", env=off)


def bound(bench: Bench, out: dict) -> None:
    env = {
        **bench.env,
        "CORRAL_GANG_TIMEOUT": "3",
        "CORRAL_FAKE_CLOUD": str(bench.cloud_file(60.0, 8)),
    }
    run_id, _, _ = bench.launch(2, env=env)
    store = bench.store()
    deadline = time.time() + 120
    while True:
        first = [a for a in store.attempts(run_id) if a.number == 1 and a.billed_until]
        if first:
            break
        if time.time() > deadline:
            raise SystemExit("the gang that cannot form was not released")
        time.sleep(0.2)
    bench.corral("cancel", run_id, env=env)
    a = first[0]
    assert a.started_at is not None and a.billed_until is not None
    out["bound_s"] = 3.0
    out["bound_node_s"] = round((a.billed_until - a.started_at).total_seconds(), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--nodes", default="2,4", help="gang sizes (comma-separated)")
    parser.add_argument("--launch-delay", type=float, default=0.5, help="the fake boot, s")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print where each timed start went, per phase and per node (CPU told apart)",
    )
    parser.add_argument(
        "--starts-only",
        action="store_true",
        help="time the starts only (no repair, relaunch or bound)",
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="corral-multinode-") as tmp:
        bench = Bench(Path(tmp), args.launch_delay, 2 * max(sizes) + 2, trace=args.trace)
        try:
            warm(bench)
            run_id, marks, began = bench.launch(1)
            out["single_start_s"] = round(wait_training(marks, 1, 1) - began, 2)
            bench.trace("single_start_s", run_id, 1, began, marks)
            bench.corral("cancel", run_id, "--wait")
            for n in sizes:
                measure(bench, n, out, args.starts_only)
            if not args.starts_only:
                bound(bench, out)
        finally:
            if bench.meter is not None:
                bench.meter.stop()
            subprocess.run(
                [sys.executable, "-m", "corral.cli", "controller", "stop"],
                env=bench.env,
                capture_output=True,
            )
    if args.json:
        print(json.dumps({**out, "trace": bench.traces} if args.trace else out, indent=2))
        return 0
    report(out, sizes)
    for label, traced in bench.traces.items():
        print()
        print(gang_trace.render(f"{label} {out[label]:.2f} s:", traced["phases"], traced["nodes"]))
    return 0


def report(out: dict[str, float], sizes: list[int]) -> None:
    single = out["single_start_s"]
    print(f"{'figure':<24}{'value':>10}  against")
    print(f"{'single_start_s':<24}{single:>10.2f}  (the baseline: one node, same job, warm)")
    for n in sizes:
        g = out[f"gang_start_s_{n}"]
        print(f"{f'gang_start_s_{n}':<24}{g:>10.2f}  {g / single:.2f}x single (target <= 1.5x)")
        if f"repair_s_{n}" in out:
            r, rl = out[f"repair_s_{n}"], out[f"relaunch_s_{n}"]
            print(f"{f'repair_s_{n}':<24}{r:>10.2f}  relaunch_s_{n} {rl:.2f} (target: below)")
            print(f"{f'idle_node_hours_{n}':<24}{out[f'idle_node_hours_{n}']:>10.5f}")
    if "bound_node_s" in out:
        print(f"{'bound_node_s':<24}{out['bound_node_s']:>10.2f}  bound {out['bound_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
