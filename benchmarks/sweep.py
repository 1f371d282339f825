"""Sweeps: what pruning saves, whether the best trial survives it, and the controller's
overhead per trial.

    python benchmarks/sweep.py [--json] [--trials 32] [--parallel 4] [--steps 300]

On the simulated cloud (the fake provider, on-demand at $3.60 an hour: a trial's cost is its
billed seconds / 1000), two sweeps of the same synthetic job run one after the other under
one real controller (``corral sweep launch``): the baseline, pruning off, and the same sweep
with the median pruner. Every trial's loss curve is known: ``(log10(lr) + 2.5)^2 + 1/step``
over ``--steps`` steps (0.1 s each: 30 s by default; on a job of a few seconds the machine's
boot, which pruned and unpruned trials pay alike, would be most of every trial's bill), so
the best learning rate is 10^-2.5 and every trial's
final loss is known in advance; the search is a grid of ``--trials`` learning rates spread
log-uniformly over [1e-5, 1], so "the best trial found" is exact.

Figures (``--json`` keys):

- ``cost_ratio_pruned``: the pruned sweep's total cost over the unpruned one's (target <= 0.5).
- ``best_found``: the pruned sweep's best trial is the grid's true best (its lowest final
  loss), and it was not pruned.
- ``overhead_s_per_trial``: per trial, the seconds the controller adds: from the trial's row
  to its machine asked for (the run's first attempt started), plus from the run's end to the
  trial's end recorded (median; target < 1 s). The machine's boot and teardown are the
  provider's, not counted (``boot_s_per_trial``: from the machine asked for to the job's
  first step). Measured in the unpruned sweep (every trial runs to its end).
- ``wall_s_unpruned``, ``wall_s_pruned``, ``cost_usd_unpruned``, ``cost_usd_pruned``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """\
import math, os, sys, time
from corral.sdk import report
lr, steps = float(os.environ["LR"]), int(os.environ["STEPS"])
marks = open(os.environ["MARKS"], "a", buffering=1)
for step in range(1, steps + 1):
    time.sleep(0.1)
    report(step=step, total=steps, loss=(math.log10(lr) + 2.5) ** 2 + 1.0 / step)
    if step == 1 or step == steps:
        marks.write(f"{lr!r} {step} {time.time():.6f}\\n")
"""

CLOUD = {
    "offers": [
        {"id": "cpu", "region": "us-east", "gpu_type": "L4", "gpu_count": 1,
         "on_demand_price": 3.6, "capacity": 64}
    ],
    "launch_delay_s": 0.1,
}  # fmt: skip


def final_loss(lr: float, steps: int) -> float:
    return (math.log10(lr) + 2.5) ** 2 + 1.0 / steps


def grid(trials: int) -> list[float]:
    """``trials`` learning rates log-uniform over [1e-5, 1], in a fixed shuffled order (a grid
    walked in sorted order would meet the good ones all together)."""
    import random

    values = [float(f"{10 ** (-5 + 5 * i / (trials - 1)):.6g}") for i in range(trials)]
    random.Random(7).shuffle(values)
    return values


def _corral(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "corral.cli", *args], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"corral {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def run_sweep(
    work: Path, env: dict[str, str], name: str, args: argparse.Namespace, prune: bool
) -> dict:
    d = work / name
    d.mkdir()
    (d / "train.py").write_text(JOB)
    values = ", ".join(repr(v) for v in grid(args.trials))
    pruner = "{pruner: median, min_trials: 3, warmup_steps: 5}" if prune else "{pruner: none}"
    (d / "corral.yaml").write_text(
        f"name: {name}\n"
        f"run: {sys.executable} train.py\n"
        f"env: {{LR: '0.1', STEPS: '{args.steps}', MARKS: '{d / 'marks.txt'}'}}\n"
        "resources: {gpus: 'L4:1', spot: false, providers: [fake]}\n"
        "budget: {max_cost_usd: 1}\n"
        "sweep:\n"
        f"  parameters: {{env.LR: {{values: [{values}]}}}}\n"
        "  metric: {name: loss, goal: minimize}\n"
        "  search: grid\n"
        f"  max_trials: {args.trials}\n"
        f"  max_parallel: {args.parallel}\n"
        f"  prune: {pruner}\n"
    )
    t0 = time.time()
    _corral(env, "sweep", "launch", str(d / "corral.yaml"), "--json")
    while True:
        view = json.loads(_corral(env, "sweep", "status", name, "--json"))
        if view["state"] in ("FINISHED", "STOPPED"):
            break
        time.sleep(0.5)
    view["wall_s"] = time.time() - t0
    view["marks"] = [line.split() for line in (d / "marks.txt").read_text().splitlines()]
    return view


def overhead(env: dict[str, str], view: dict) -> tuple[float, float]:
    """Median seconds per trial the controller adds, and the machine's boot (see the
    docstring)."""
    from corral.store import Store

    os.environ["CORRAL_HOME"] = env["CORRAL_HOME"]
    store = Store.open()
    firsts = {lr: float(ts) for lr, step, ts in view["marks"] if int(step) == 1}
    added, boots = [], []
    for t in store.trials(view["name"]):
        run = store.get_run(t.run_id, with_spec=False)
        attempt = store.get_attempt(t.run_id, 1)
        if attempt.started_at is None or run.finished_at is None:
            continue
        asked = attempt.started_at.timestamp()
        added.append(
            asked
            - t.created_at.timestamp()
            + t.updated_at.timestamp()
            - run.finished_at.timestamp()
        )
        first = firsts.get(repr(t.params["env.LR"]))
        if first is not None:
            boots.append(first - asked)
    store.close()
    median = statistics.median
    return (median(added) if added else math.nan, median(boots) if boots else math.nan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="corral-sweep-"))
    (tmp / "cloud.json").write_text(json.dumps(CLOUD))
    env = dict(
        os.environ,
        CORRAL_HOME=str(tmp / "home"),
        CORRAL_CONTROLLER_IDLE_EXIT="30",
        CORRAL_FAKE_CLOUD=str(tmp / "cloud.json"),
        CORRAL_PROVIDERS="fake",
    )
    env.pop("CORRAL_DATABASE_URL", None)
    try:
        plain = run_sweep(tmp, env, "plain", args, prune=False)
        pruned = run_sweep(tmp, env, "pruned", args, prune=True)
        per_trial, boot = overhead(env, plain)
    finally:
        subprocess.run(
            [sys.executable, "-m", "corral.cli", "controller", "stop"], env=env, capture_output=True
        )
    truth = min(grid(args.trials), key=lambda lr: final_loss(lr, args.steps))
    best = pruned["best_params"] or {}
    best_trial = next((t for t in pruned["trials"] if t["best"]), None)
    figures = {
        "trials": args.trials,
        "cost_usd_unpruned": round(plain["spent_usd"], 6),
        "cost_usd_pruned": round(pruned["spent_usd"], 6),
        "cost_ratio_pruned": round(pruned["spent_usd"] / plain["spent_usd"], 3),
        "pruned_trials": sum(1 for t in pruned["trials"] if t["state"] == "pruned"),
        "best_found": best.get("env.LR") == truth and best_trial is not None,
        "wall_s_unpruned": round(plain["wall_s"], 1),
        "wall_s_pruned": round(pruned["wall_s"], 1),
        "overhead_s_per_trial": round(per_trial, 3),
        "boot_s_per_trial": round(boot, 3),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    rows = [
        ("total cost, pruning off (baseline)", f"${figures['cost_usd_unpruned']:.4f}"),
        ("total cost, median pruning", f"${figures['cost_usd_pruned']:.4f}"),
        ("cost ratio (target <= 0.5)", f"{figures['cost_ratio_pruned']:.3f}"),
        ("trials pruned", f"{figures['pruned_trials']} of {args.trials}"),
        ("best trial found (lr 10^-2.5 nearest)", str(figures["best_found"])),
        ("wall time off / on", f"{figures['wall_s_unpruned']} s / {figures['wall_s_pruned']} s"),
        ("controller overhead per trial (target < 1 s)", f"{figures['overhead_s_per_trial']} s"),
        ("machine boot per trial (the provider's)", f"{figures['boot_s_per_trial']} s"),
    ]
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
