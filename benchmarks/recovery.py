"""Recovery: how fast a preempted run trains again, and what spot + corral costs.

    python benchmarks/recovery.py [--json] [--hours 10] [--rate 1.1] [--seed 7] [--baseline-tree DIR]

With ``--baseline-tree`` (a checkout of another corral), part 1 is measured again with that
tree's ``src`` first on PYTHONPATH, in the same run: the named baseline it is compared against.

1. On the local provider, in one run: a job checkpointing with the SDK is preempted by hand
   (`corral debug preempt`); measured: seconds from the preemption signal until training runs
   again at the step it had reached, and the steps lost; against the same job restarted from
   scratch (no resume) under the same controller. Target: resumed within 5 s plus process start,
   zero lost steps when the grace period covers one save.
2. A spot-market simulation on the fake provider's preemption model (seeded, exponential at
   --rate preemptions per machine-hour, the rate SaladCloud reports) and its default L40S prices,
   on a simulated clock: a --hours job run by corral (resume from the last checkpoint after each
   preemption, paying provisioning + restore overhead), run on-demand only, and restarted from
   scratch after each preemption (capped at 10x the job's length).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """\
import os, sys, time
from corral import sdk
marks = open(os.environ.get("MARKS", "marks.txt"), "a", buffering=1)
def mark(what, step):
    marks.write(f"{time.time():.6f} {os.environ.get('CORRAL_ATTEMPT', '0')} {what} {step}\\n")
sdk.install_signal_handlers()
ck = sdk.Checkpointer()
state = None if os.environ.get("NO_RESUME") else ck.restore()
step = state["step"] if state else 0
mark("start", step)
while step < 100000:
    step += 1
    time.sleep(0.02)
    mark("step", step)
    if step % 10 == 0:
        ck.save({"step": step}, step)
    if sdk.preempted():
        mark("preempted", step)
    sdk.exit_if_preempted(ck, lambda: {"step": step}, step)
"""


def compile_corral() -> None:
    """Byte-compile corral's modules first, as ``pip install`` does (and as the first run of
    an editable install does unless PYTHONDONTWRITEBYTECODE is set, as it is on some CI
    machines): the figures are those of an installed corral, not of Python compiling its
    sources on every start."""
    import importlib.util

    spec = importlib.util.find_spec("corral")
    assert spec is not None and spec.submodule_search_locations
    for location in spec.submodule_search_locations:
        subprocess.run([sys.executable, "-m", "compileall", "-q", location], check=True)


def _corral(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "corral.cli", *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def _marks(path: Path) -> list[tuple[float, int, str, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            rows.append((float(parts[0]), int(parts[1]), parts[2], int(parts[3])))
    return rows


def _wait(pred, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.01)
    raise SystemExit("recovery benchmark: timed out")


def measure(work: Path, env: dict[str, str], *, resume: bool) -> tuple[float, int]:
    """(seconds from the preemption to training at the reached step again, steps lost)."""
    name = "resume" if resume else "scratch"
    d = work / name
    d.mkdir()
    (d / "job.py").write_text(JOB)
    extra = "" if resume else "\nenv: {NO_RESUME: '1'}"
    (d / "corral.yaml").write_text(
        f"name: bench-{name}\nrun: {sys.executable} job.py\n"
        f"recovery: {{max_preemption_restarts: 3}}{extra}\n"
    )
    run = json.loads(_corral(env, "launch", str(d / "corral.yaml"), "--detach", "--json"))
    marks = d / "marks.txt"
    _wait(lambda: any(m[2] == "step" and m[3] >= 60 for m in _marks(marks)))
    t0 = time.time()
    _corral(env, "debug", "preempt", run["id"], "--grace", "5")
    reached = _wait(lambda: next((m[3] for m in _marks(marks) if m[2] == "preempted"), None))
    back = _wait(
        lambda: next(
            (
                m
                for m in _marks(marks)
                if m[1] >= 2 and m[2] in ("start", "step") and m[3] >= reached
            ),
            None,
        )
    )
    restarted = next(m for m in _marks(marks) if m[1] >= 2 and m[2] == "start")
    _corral(env, "cancel", run["id"], "--wait")
    return back[0] - t0, reached - restarted[3]


#: the fake cloud of the cloud row: one spot machine kind, a short notice
CLOUD = {
    "offers": [
        {"id": "l4-1", "region": "us-east", "gpu_type": "L4", "gpu_count": 1, "spot_price": 0.3}
    ],
    "launch_delay_s": 0.2,
    "notice_s": 10.0,
}


def measure_cloud(work: Path, env: dict[str, str], preemptions: int = 5) -> list[float]:
    """Seconds from each preemption notice to training at the reached step again on a new
    machine of the fake cloud (the marks go to a file outside the machines)."""
    d = work / "cloud"
    d.mkdir()
    (d / "cloud.json").write_text(json.dumps(CLOUD))
    (d / "job.py").write_text(JOB)
    marks = d / "marks.txt"
    env = dict(env, CORRAL_FAKE_CLOUD=str(d / "cloud.json"), CORRAL_PROVIDERS="fake")
    (d / "corral.yaml").write_text(
        f"name: bench-cloud\nrun: python job.py\n"
        "resources: {gpus: 'L4:1', spot: true, providers: [fake]}\n"
        f"checkpoints: {{storage: 'file://{d / 'bucket'}'}}\n"
        f"recovery: {{max_preemption_restarts: {preemptions + 1}}}\n"
        f"env: {{MARKS: '{marks}'}}\n"
    )
    run = json.loads(_corral(env, "launch", str(d / "corral.yaml"), "--detach", "--json"))
    times = []
    try:
        for attempt in range(1, preemptions + 1):
            _wait(lambda a=attempt: _steps_in(marks, a) >= 30)
            t0 = time.time()
            _corral(env, "debug", "preempt", run["id"], "--grace", "5")
            reached = _wait(
                lambda a=attempt: next(
                    (m[3] for m in _marks(marks) if m[1] == a and m[2] == "preempted"), None
                )
            )
            back = _wait(
                lambda a=attempt, r=reached: next(
                    (
                        m
                        for m in _marks(marks)
                        if m[1] > a and m[2] in ("start", "step") and m[3] >= r
                    ),
                    None,
                )
            )
            times.append(back[0] - t0)
    finally:
        subprocess.run(
            [sys.executable, "-m", "corral.cli", "cancel", run["id"], "--wait"],
            env=env,
            capture_output=True,
        )
    return times


def _steps_in(marks: Path, attempt: int) -> int:
    """Steps the attempt has trained past its start."""
    rows = [m for m in _marks(marks) if m[1] == attempt]
    starts = [m[3] for m in rows if m[2] == "start"]
    steps = [m[3] for m in rows if m[2] == "step"]
    return max(steps) - starts[0] if starts and steps else 0


def process_start_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import corral.sdk.checkpoint"], check=True)
    return time.perf_counter() - t0


def simulate(
    hours: float,
    rate: float,
    seed: int,
    *,
    overhead_h: float = 0.05,
    checkpoint_every_h: float = 0.0,
) -> dict[str, float]:
    """Cost and wall hours of a `hours` job on spot (corral: resume; scratch: start over) and
    on-demand, with the fake cloud's preemption trace and its L40S prices."""
    from corral.providers.fake import DEFAULT_CATALOG, FakeCloud, preemption_at

    entry = next(e for e in DEFAULT_CATALOG if e.gpu_type == "L40S")
    cloud = FakeCloud(rate_per_hour=rate, seed=seed)
    spot, ondemand = entry.spot_price, entry.on_demand_price

    def run(resume: bool) -> tuple[float, float]:
        done, clock, index = 0.0, 0.0, 0  # work hours done, wall hours, launch index
        cap = 10 * hours
        while done < hours and clock < cap:
            at, _ = preemption_at(
                cloud, key=f"sim-{index}", index=index, launched_at=clock * 3600.0, spot=True
            )
            life = ((at / 3600.0) - clock) if at is not None else float("inf")
            need = overhead_h + (hours - done)
            if life >= need:
                clock += need
                done = hours
                break
            clock += life
            worked = max(0.0, life - overhead_h)
            if resume:  # the notice lets the SDK save: keep everything but partial intervals
                kept = (
                    worked
                    if not checkpoint_every_h
                    else (worked // checkpoint_every_h) * checkpoint_every_h
                )
                done += kept
            index += 1
        return clock * spot, clock

    corral_cost, corral_hours = run(resume=True)
    scratch_cost, scratch_hours = run(resume=False)
    return {
        "sim_cost_corral": round(corral_cost, 2),
        "sim_hours_corral": round(corral_hours, 2),
        "sim_cost_ondemand": round(hours * ondemand, 2),
        "sim_hours_ondemand": round(hours, 2),
        "sim_cost_scratch": round(scratch_cost, 2),
        "sim_hours_scratch": round(scratch_hours, 2),
        "sim_scratch_finished": scratch_hours < 10 * hours,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--hours", type=float, default=10.0, help="simulated job length, hours")
    parser.add_argument("--rate", type=float, default=1.1, help="preemptions per machine-hour")
    parser.add_argument("--seed", type=int, default=7, help="seed of the preemption trace")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="another corral checkout measured in the same run (its src first on PYTHONPATH)",
    )
    args = parser.parse_args(argv)
    compile_corral()
    if args.baseline_tree is not None:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(args.baseline_tree / "src")], check=True
        )

    tmp = Path(tempfile.mkdtemp(prefix="corral-recovery-"))
    env = dict(os.environ, CORRAL_HOME=str(tmp / "home"), CORRAL_CONTROLLER_IDLE_EXIT="20")
    env.pop("CORRAL_DATABASE_URL", None)
    env.pop("CORRAL_PROVIDERS", None)
    try:
        resume_s, lost = measure(tmp, env, resume=True)
        scratch_s, _ = measure(tmp, env, resume=False)
        cloud = measure_cloud(tmp, env)
        subprocess.run(
            [sys.executable, "-m", "corral.cli", "controller", "stop"], env=env, capture_output=True
        )
        before_s = None
        if args.baseline_tree is not None:
            before_env = dict(
                env,
                CORRAL_HOME=str(tmp / "home-before"),
                PYTHONPATH=str(args.baseline_tree.resolve() / "src"),
            )
            before_dir = tmp / "before"
            before_dir.mkdir()
            before_s, _ = measure(before_dir, before_env, resume=True)
            subprocess.run(
                [sys.executable, "-m", "corral.cli", "controller", "stop"],
                env=before_env,
                capture_output=True,
            )
    finally:
        subprocess.run(["pkill", "-f", re.escape(str(tmp))], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    start_s = process_start_s()
    result = {
        "resume_s": round(resume_s, 3),
        "lost_steps": lost,
        "scratch_resume_s": round(scratch_s, 3),
        "resume_cloud_s": round(statistics.median(cloud), 3),
        "resume_cloud_all_s": [round(x, 3) for x in cloud],
        "process_start_s": round(start_s, 3),
        **simulate(args.hours, args.rate, args.seed),
    }
    if before_s is not None:
        result["baseline_resume_s"] = round(before_s, 3)
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="recovery")
    for col in ("figure", "corral", "baseline", "target", "ok"):
        t.add_column(col)
    ok_resume = resume_s <= 5 + start_s
    t.add_row(
        "preemption -> training at the same step",
        f"{resume_s:.2f} s",
        f"from scratch {scratch_s:.2f} s",
        f"<= 5 s + start ({start_s:.2f} s)",
        "yes" if ok_resume else "NO",
    )
    if before_s is not None:
        t.add_row(
            "  the baseline tree, same run",
            f"{before_s:.2f} s",
            "-",
            "corral no slower (5 % noise)",
            "yes" if resume_s <= before_s * 1.05 else "NO",
        )
    t.add_row("steps lost", str(lost), "-", "0", "yes" if lost == 0 else "NO")
    cloud_s = result["resume_cloud_s"]
    t.add_row(
        "fake cloud: notice -> training again on a new machine (median of 5)",
        f"{cloud_s:.2f} s",
        ", ".join(f"{x:.2f}" for x in cloud),
        "< 5 s",
        "yes" if cloud_s < 5 else "NO",
    )
    r = result
    t.add_row(
        f"{args.hours:g} h job, spot at {args.rate}/h: cost",
        f"${r['sim_cost_corral']:.2f}",
        f"on-demand ${r['sim_cost_ondemand']:.2f}; scratch ${r['sim_cost_scratch']:.2f}"
        + ("" if r["sim_scratch_finished"] else " (unfinished)"),
        "< on-demand",
        "yes" if r["sim_cost_corral"] < r["sim_cost_ondemand"] else "NO",
    )
    t.add_row(
        "  wall hours",
        f"{r['sim_hours_corral']:.1f} h",
        f"on-demand {r['sim_hours_ondemand']:.1f} h; scratch {r['sim_hours_scratch']:.1f} h",
        "-",
        "-",
    )
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
