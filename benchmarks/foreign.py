"""What mirroring a script's own checkpoints (``checkpoints.path``) costs the script.

    python benchmarks/foreign.py [--json] [--size-mb 1024] [--every 10] [--duration 60]
        [--pairs 4] [--preempt-every 1,3,10] [--preempt-size-mb 64] [--trials 3]

A stand-in job (a process of its own, as a stage is) does fixed CPU work per step and every
``--every`` seconds rewrites a ``--size-mb`` checkpoint ``ckpt.pt`` the way ``torch.save`` to a
temporary name + ``os.replace`` does. It runs for ``--duration`` seconds alone and as long with
the agent's mirror, in ``--pairs`` back-to-back pairs of segments (alone/mirrored, then
mirrored/alone, ...): the agent's mirror (:class:`corral.agent.path_mirror.PathMirror`, the
hook ``checkpoints.path`` turns on) copying each new checkpoint to a storage directory
(``--dir``, default a temporary directory) with its sha256 manifest.

Figures (``--json`` keys):

* ``mirror_lag_s``: median delay from a checkpoint settling (renamed into place) to its copy
  being complete in storage (``mirror_lag_max_s``: the largest);
* ``slowdown_pct``: the job's mean step time (saves included) mirrored against unmirrored,
  in percent, the median of the pairs' (``slowdown_pairs_pct``: each pair's; target under 5);
* ``upload_s``: median time of one copy (read, sha256, write, fsync), ``save_s``: median time
  the job took to write one checkpoint (for scale);
* ``step_ms_unmirrored``, ``step_ms_mirrored``, ``uploads``, ``saves``, ``size_mb``.

Then the same mirror against a job that rewrites its checkpoint **in place** (``torch.save``
straight to ``ckpt.pt``, ``--preempt-size-mb``) every 1 s, 3 s and 10 s (``--preempt-every``),
preempted at a random moment (between two and four save intervals in): the agent's look at the
stop, SIGTERM (the job dies at once: it does not save on it), the end-of-stage copy. For each
interval, over ``--trials`` preemptions:

* ``lost_vs_floor_<N>s``: the work lost (from the save that the newest copy in storage holds,
  or from the start, to the preemption) minus the floor (from the last save complete on disk to
  the preemption), in seconds, the worst trial (target: at most one save interval);
  ``lost_vs_floor_mean_<N>s`` the mean;
* ``mirrored_share_<N>s``: the saves copied to storage over the saves made (all trials).

Small sizes (``--size-mb 4 --every 0.5 --duration 2 --pairs 1 --preempt-every 0.5
--trials 1``) make a smoke test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from corral.agent.path_mirror import PathMirror
from corral.wire.plan import AgentPlan

JOB = """\
import hashlib, json, os, sys, time
size, every, duration, rounds, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), \\
    int(sys.argv[4]), sys.argv[5]
block = bytes(range(256)) * 4096  # 1 MiB
data = memoryview(block * (size // len(block)) + block[: size % len(block)])
steps, saves, save_s = [], [], []
began = last_save = time.perf_counter()
while time.perf_counter() - began < duration:
    t0 = time.perf_counter()
    h = hashlib.sha256()
    for _ in range(rounds):
        h.update(block)
    if time.perf_counter() - last_save >= every:
        s0 = time.perf_counter()
        with open("ckpt.pt.tmp", "wb") as f:
            for i in range(0, size, 64 << 20):  # in pieces, as torch.save writes
                f.write(data[i : i + (64 << 20)])
        os.replace("ckpt.pt.tmp", "ckpt.pt")
        saves.append(time.time())
        save_s.append(time.perf_counter() - s0)
        last_save = time.perf_counter()
    steps.append(time.perf_counter() - t0)
json.dump({"steps": steps, "saves": saves, "save_s": save_s}, open(out, "w"))
"""


class _Events:
    """Records the mirror's events with the wall time each was emitted at."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def emit(self, type: str, stage: str | None = None, data: dict | None = None) -> dict:
        with self._lock:
            self.items.append((time.time(), type, dict(data or {})))
        return {}


# A job that saves in place (torch.save(state, "ckpt.pt")) every `every` seconds: the save's
# number first, then the state; each save's number and the time it was complete on disk go to
# the save log once the file is closed. It never handles SIGTERM.
IN_PLACE_JOB = """\
import hashlib, sys, time
size, every, rounds, log = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
block = bytes(range(256)) * 4096  # 1 MiB
data = memoryview(block * (size // len(block)) + block[: size % len(block)])
n, last = 0, time.perf_counter()
with open(log, "a") as saves:
    while True:
        h = hashlib.sha256()
        for _ in range(rounds):
            h.update(block)
        if time.perf_counter() - last >= every:
            n += 1
            with open("ckpt.pt", "wb") as f:
                f.write(b"%012d" % n)
                for i in range(0, size, 16 << 20):
                    f.write(data[i : i + (16 << 20)])
            saves.write(f"{n} {time.time()}\\n")
            saves.flush()
            last = time.perf_counter()
"""


class _Runner:
    """The runner as the hook sees it: one stage, its exit code once it ended."""

    started_at = 0.0

    def __init__(self) -> None:
        self.exit_code: int | None = None

    def request_stop(self, reason: str = "", cause: Any = None) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"stages": [{"name": "main", "exit_code": self.exit_code, "progress": None}]}

    def set_resume(self, path: str) -> None:
        pass


def _rounds_for(step_ms: float) -> int:
    """How many 1 MiB sha256 rounds take about ``step_ms`` here."""
    block = bytes(range(256)) * 4096
    t0 = time.perf_counter()
    h = hashlib.sha256()
    for _ in range(20):
        h.update(block)
    per = (time.perf_counter() - t0) / 20
    return max(1, round(step_ms / 1000 / per))


def _plan(work: Path, root: Path, run_id: str) -> AgentPlan:
    return AgentPlan.model_validate(
        {
            "run_id": run_id,
            "attempt": 1,
            "workdir": str(work),
            "checkpoint_dir": str(root / "ckpt"),
            "state_dir": str(root / "state"),
            "stages": [{"name": "main", "run": "true"}],
            "checkpoint_paths": ["ckpt.pt"],
            "checkpoint_storage": str(root / "store"),
            "env": {"CORRAL_CHECKPOINT_KEEP_LAST": "2"},
        }
    )


def _preempted(root: Path, n: int, size: int, every: float, rounds: int) -> dict[str, float]:
    """One in-place job, mirrored, preempted at a random moment: lost work and floor (s)."""
    work = root / f"preempted-{n}"
    work.mkdir()
    log = work / "saves.log"
    events = _Events()
    hook = PathMirror(_plan(work, root, f"bench-p{n}"), events, environ={})
    runner = _Runner()
    if hook.before_stages(runner) is not None:
        raise SystemExit("the mirror did not start")
    try:
        job = [sys.executable, "-c", IN_PLACE_JOB, str(size), str(every), str(rounds), str(log)]
        proc = subprocess.Popen(job, cwd=work)
        began = time.time()
        time.sleep(random.uniform(2 * every, 4 * every))
        hook.stopping()  # the agent's look right before the stop signal
        stopped = time.time()
        proc.terminate()
        proc.wait()
        runner.exit_code = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
        hook.after_stages(runner, "preempted")
    finally:
        hook.close()
    saves = {}
    for line in log.read_text().splitlines():
        number, at = line.split()
        saves[int(number)] = float(at)
    on_disk = max((at for at in saves.values() if at <= stopped), default=began)
    snaps = root / "store" / f"bench-p{n}" / "mirror"
    # no folder: nothing was mirrored before the stop (a loaded machine's first save came late)
    complete = [d for d in snaps.iterdir() if (d / "COMPLETE").is_file()] if snaps.is_dir() else []
    newest = max(complete, default=None)
    copied = began
    if newest is not None:
        copied = saves[int((newest / "files" / "ckpt.pt").read_bytes()[:12])]
    uploads = sum(kind == "checkpoint.uploaded" for _, kind, _ in events.items)
    return {
        "lost_s": stopped - copied,
        "floor_s": stopped - on_disk,
        "saves": sum(at <= stopped for at in saves.values()),
        "uploads": uploads,
    }


def measure_preempted(
    size_mb: float, intervals: list[float], trials: int, step_ms: float, base: str | None
) -> dict[str, Any]:
    size = int(size_mb * 1024 * 1024)
    rounds = _rounds_for(step_ms)
    out: dict[str, Any] = {"preempt_size_mb": size_mb}
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        root = Path(tmp)
        for every in intervals:
            runs = [
                _preempted(root, len(out) * 100 + i, size, every, rounds) for i in range(trials)
            ]
            over = [r["lost_s"] - r["floor_s"] for r in runs]
            key = f"{every:g}s"
            out[f"lost_vs_floor_{key}"] = round(max(over), 3)
            out[f"lost_vs_floor_mean_{key}"] = round(statistics.fmean(over), 3)
            out[f"floor_mean_{key}"] = round(statistics.fmean(r["floor_s"] for r in runs), 3)
            saves = sum(int(r["saves"]) for r in runs)
            share = sum(int(r["uploads"]) for r in runs) / saves if saves else 0.0
            out[f"mirrored_share_{key}"] = round(min(1.0, share), 3)
    return out


def _job(work: Path, size: int, every: float, duration: float, rounds: int) -> dict[str, Any]:
    out = work / "job.json"
    subprocess.run(
        [sys.executable, "-c", JOB, str(size), str(every), str(duration), str(rounds), str(out)],
        cwd=work,
        check=True,
    )
    return json.loads(out.read_text())


def _copies_done(hook: PathMirror, events: _Events, timeout: float = 120.0) -> None:
    """Wait until the mirror has copied what the job saved (a tree before ``waiting()``:
    until no copy went up for 3 s)."""
    deadline = time.monotonic() + timeout
    time.sleep(0.6)  # a look or two after the job's end
    waiting = getattr(hook, "waiting", None)
    if waiting is not None:
        while waiting() and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    seen, quiet_since = len(events.items), time.monotonic()
    while time.monotonic() - quiet_since < 3.0 and time.monotonic() < deadline:
        time.sleep(0.1)
        if len(events.items) != seen:
            seen, quiet_since = len(events.items), time.monotonic()


def measure(
    size_mb: float,
    every: float,
    duration: float,
    step_ms: float,
    base: str | None,
    pairs: int = 4,
) -> dict[str, Any]:
    """The job alone and mirrored, ``duration`` seconds each, in ``pairs`` back-to-back
    pairs of segments (alone then mirrored, then mirrored then alone, ...): on a shared
    machine whose load drifts, each pair sees the same load, and the slowdown is the median
    of the pairs'. Each mirrored segment's copies are done before the next segment starts."""
    size = int(size_mb * 1024 * 1024)
    rounds = _rounds_for(step_ms)
    segment = duration / pairs
    alone: list[dict[str, Any]] = []
    withm: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        root = Path(tmp)
        plain, mirrored = root / "plain", root / "mirrored"
        plain.mkdir()
        mirrored.mkdir()
        events = _Events()
        hook = PathMirror(_plan(mirrored, root, "bench-1"), events, environ={})
        runner = _Runner()
        if hook.before_stages(runner) is not None:
            raise SystemExit("the mirror did not start")
        try:
            for pair in range(pairs):
                for kind in ("plain", "mirrored")[:: 1 if pair % 2 == 0 else -1]:
                    if kind == "plain":
                        alone.append(_job(plain, size, every, segment, rounds))
                        continue
                    withm.append(_job(mirrored, size, every, segment, rounds))
                    _copies_done(hook, events)
            runner.exit_code = 0
            hook.after_stages(runner, "succeeded")
        finally:
            hook.close()
    uploads = [(t, d) for t, kind, d in events.items if kind == "checkpoint.uploaded"]
    saves = sorted(t for run in withm for t in run["saves"])
    lags = []
    for done, _ in uploads:
        before = [t for t in saves if t <= done]
        if before:
            lags.append(done - before[-1])

    def mean_ms(runs: list[dict[str, Any]]) -> float:
        return statistics.fmean(t for run in runs for t in run["steps"]) * 1000

    ratios = [mean_ms([m]) / mean_ms([a]) - 1 for a, m in zip(alone, withm, strict=True)]
    save_s = [t for run in withm for t in run["save_s"]]
    return {
        "size_mb": size_mb,
        "every_s": every,
        "pairs": pairs,
        "saves": len(saves),
        "uploads": len(uploads),
        "mirror_lag_s": round(statistics.median(lags), 3) if lags else None,
        "mirror_lag_max_s": round(max(lags), 3) if lags else None,
        "upload_s": round(statistics.median(d["duration_s"] for _, d in uploads), 3)
        if uploads
        else None,
        "save_s": round(statistics.median(save_s), 3) if save_s else None,
        "step_ms_unmirrored": round(mean_ms(alone), 3),
        "step_ms_mirrored": round(mean_ms(withm), 3),
        "slowdown_pct": round(statistics.median(ratios) * 100, 2),
        "slowdown_pairs_pct": [round(r * 100, 2) for r in ratios],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--size-mb", type=float, default=1024.0, help="checkpoint size")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between saves")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per job run")
    parser.add_argument("--step-ms", type=float, default=50.0, help="CPU work per step")
    parser.add_argument("--dir", default=None, help="where the job and storage write")
    parser.add_argument(
        "--preempt-every",
        default="1,3,10",
        help="seconds between in-place saves of the preempted job (comma-separated)",
    )
    parser.add_argument("--preempt-size-mb", type=float, default=64.0, help="its checkpoint")
    parser.add_argument("--trials", type=int, default=3, help="preemptions per interval")
    parser.add_argument("--pairs", type=int, default=4, help="alone/mirrored segment pairs")
    args = parser.parse_args()
    result = measure(
        args.size_mb, args.every, args.duration, args.step_ms, args.dir, max(1, args.pairs)
    )
    intervals = [float(x) for x in args.preempt_every.split(",") if x.strip()]
    if intervals and args.trials > 0:
        result.update(
            measure_preempted(args.preempt_size_mb, intervals, args.trials, args.step_ms, args.dir)
        )
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['size_mb']:g} MiB checkpoint every {result['every_s']:g} s: "
        f"{result['saves']} saves, {result['uploads']} mirrored"
    )
    print(f"  mirror_lag_s  {result['mirror_lag_s']} (max {result['mirror_lag_max_s']})")
    print(
        f"  step time     {result['step_ms_unmirrored']:.2f} ms alone, "
        f"{result['step_ms_mirrored']:.2f} ms mirrored: slowdown {result['slowdown_pct']:+.2f} % "
        f"(median of {result['pairs']} pairs: {result['slowdown_pairs_pct']})"
    )
    for every in intervals if args.trials > 0 else []:
        key = f"{every:g}s"
        print(
            f"  in place every {key}: {result[f'mirrored_share_{key}'] * 100:.0f} % of saves "
            f"mirrored; preempted, lost work over the floor {result[f'lost_vs_floor_{key}']} s "
            f"worst, {result[f'lost_vs_floor_mean_{key}']} s mean (floor "
            f"{result[f'floor_mean_{key}']} s mean)"
        )


if __name__ == "__main__":
    main()
