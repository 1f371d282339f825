"""What mirroring a script's own checkpoints (``checkpoints.path``) costs the script.

    python benchmarks/foreign.py [--json] [--size-mb 1024] [--every 10] [--duration 60]

A stand-in job (a process of its own, as a stage is) does fixed CPU work per step and every
``--every`` seconds rewrites a ``--size-mb`` checkpoint ``ckpt.pt`` the way ``torch.save`` to a
temporary name + ``os.replace`` does. It runs twice in this run, for ``--duration`` seconds
each: alone, then with the agent's mirror (:class:`corral.agent.path_mirror.PathMirror`, the
hook ``checkpoints.path`` turns on) copying each new checkpoint to a storage directory
(``--dir``, default a temporary directory) with its sha256 manifest.

Figures (``--json`` keys):

* ``mirror_lag_s``: median delay from a checkpoint settling (renamed into place) to its copy
  being complete in storage (``mirror_lag_max_s``: the largest);
* ``slowdown_pct``: the job's mean step time (saves included) mirrored against unmirrored,
  in percent (target under 5);
* ``upload_s``: median time of one copy (read, sha256, write, fsync), ``save_s``: median time
  the job took to write one checkpoint (for scale);
* ``step_ms_unmirrored``, ``step_ms_mirrored``, ``uploads``, ``saves``, ``size_mb``.

Small sizes (``--size-mb 4 --every 0.5 --duration 2``) make a smoke test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
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


class _Runner:
    started_at = 0.0

    def request_stop(self, reason: str = "", cause: Any = None) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {}

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


def _job(work: Path, size: int, every: float, duration: float, rounds: int) -> dict[str, Any]:
    out = work / "job.json"
    subprocess.run(
        [sys.executable, "-c", JOB, str(size), str(every), str(duration), str(rounds), str(out)],
        cwd=work,
        check=True,
    )
    return json.loads(out.read_text())


def measure(
    size_mb: float, every: float, duration: float, step_ms: float, base: str | None
) -> dict[str, Any]:
    size = int(size_mb * 1024 * 1024)
    rounds = _rounds_for(step_ms)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        root = Path(tmp)
        plain, mirrored = root / "plain", root / "mirrored"
        plain.mkdir()
        mirrored.mkdir()
        alone = _job(plain, size, every, duration, rounds)
        (plain / "ckpt.pt").unlink(missing_ok=True)
        plan = AgentPlan.model_validate(
            {
                "run_id": "bench-1",
                "attempt": 1,
                "workdir": str(mirrored),
                "checkpoint_dir": str(root / "ckpt"),
                "state_dir": str(root / "state"),
                "stages": [{"name": "main", "run": "true"}],
                "checkpoint_paths": ["ckpt.pt"],
                "checkpoint_storage": str(root / "store"),
                "env": {"CORRAL_CHECKPOINT_KEEP_LAST": "2"},
            }
        )
        events = _Events()
        hook = PathMirror(plan, events, environ={})
        runner = _Runner()
        if hook.before_stages(runner) is not None:
            raise SystemExit("the mirror did not start")
        try:
            withm = _job(mirrored, size, every, duration, rounds)
            hook.after_stages(runner, "succeeded")
        finally:
            hook.close()
    uploads = [(t, d) for t, kind, d in events.items if kind == "checkpoint.uploaded"]
    lags = []
    for done, _ in uploads:
        before = [s for s in withm["saves"] if s <= done]
        if before:
            lags.append(done - before[-1])
    plain_ms = statistics.fmean(alone["steps"]) * 1000
    mirrored_ms = statistics.fmean(withm["steps"]) * 1000
    return {
        "size_mb": size_mb,
        "every_s": every,
        "saves": len(withm["saves"]),
        "uploads": len(uploads),
        "mirror_lag_s": round(statistics.median(lags), 3) if lags else None,
        "mirror_lag_max_s": round(max(lags), 3) if lags else None,
        "upload_s": round(statistics.median(d["duration_s"] for _, d in uploads), 3)
        if uploads
        else None,
        "save_s": round(statistics.median(withm["save_s"]), 3) if withm["save_s"] else None,
        "step_ms_unmirrored": round(plain_ms, 3),
        "step_ms_mirrored": round(mirrored_ms, 3),
        "slowdown_pct": round((mirrored_ms / plain_ms - 1) * 100, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--size-mb", type=float, default=1024.0, help="checkpoint size")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between saves")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per job run")
    parser.add_argument("--step-ms", type=float, default=50.0, help="CPU work per step")
    parser.add_argument("--dir", default=None, help="where the job and storage write")
    args = parser.parse_args()
    result = measure(args.size_mb, args.every, args.duration, args.step_ms, args.dir)
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
        f"{result['step_ms_mirrored']:.2f} ms mirrored: slowdown {result['slowdown_pct']:+.2f} %"
    )


if __name__ == "__main__":
    main()
