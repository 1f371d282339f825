"""Launch overhead: `corral launch` to the first line of user code, against plain `python`;
and `corral ls --json` with 1,000 runs in the store.

    python benchmarks/launch_overhead.py [--json] [--repeat 5] [--baseline-tree DIR]

Targets: overhead under 1 s above plain python; listing 1,000 runs under 200 ms.
Each figure is the median of --repeat runs, in a fresh CORRAL_HOME. With ``--baseline-tree``
(a checkout of another corral, e.g. ``git worktree add /tmp/before <commit>``), the same launch
is measured with that tree's ``src`` first on PYTHONPATH, alternating with this one, in the
same run: the named baseline the figures are compared against. Each launch starts once the
run before it has ended and its agent is gone (see ``settle``). The two trees are compared by
the median of the pairs' differences (one launch of each, back to back): on a machine whose
load drifts, the two medians taken apart move more than the gap between the trees.
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

TARGET_OVERHEAD_S = 1.0
TARGET_LS_S = 0.200

FIRST_LINE = """\
import sys, time
t = time.time()
print("first line", flush=True)
open(sys.argv[1], "w").write(repr(t))
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


def _wait_file(path: Path, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text()
            if text:
                return float(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.002)
    raise SystemExit(f"timed out waiting for {path}")


def measure_direct(work: Path, i: int) -> float:
    out = work / f"direct-{i}.txt"
    t0 = time.time()
    subprocess.run(
        [sys.executable, str(work / "first_line.py"), str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return _wait_file(out) - t0


def measure_corral(work: Path, env: dict[str, str], i: int, tag: str = "corral") -> float:
    out = work / f"{tag}-{i}.txt"
    spec = work / f"spec-{tag}-{i}.yaml"
    spec.write_text(f"name: bench-{i}\nrun: {sys.executable} first_line.py {out}\n")
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-m", "corral.cli", "launch", str(spec), "--detach"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        cwd=work,
    )
    return _wait_file(out) - t0


def settle(home: str, timeout: float = 30.0) -> None:
    """Wait until the run just measured has ended and its agent is gone (the controller
    tears it down), then a little more: the next launch is measured on a machine that is not
    still finishing the last one (on two cores, the controller's end-of-run work and the
    exiting agent would otherwise overlap the next launch, for one tree or the other)."""
    deadline = time.monotonic() + timeout
    pattern = f"corral.agent .*{re.escape(home)}"
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", pattern], stdout=subprocess.DEVNULL).returncode:
            break
        time.sleep(0.05)
    time.sleep(0.3)


def measure_ls(env: dict[str, str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "corral.cli", "ls", "--json"],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fill_store(home: Path, n: int, spec_path: Path) -> None:
    os.environ["CORRAL_HOME"] = str(home)
    from corral.spec import load_spec, spec_hash
    from corral.store import Store

    spec = load_spec(spec_path)
    store = Store.open()
    dumped = spec.model_dump(mode="json")
    h = spec_hash(spec)
    for _ in range(n):
        store.create_run(
            name=spec.name,
            spec=dumped,
            spec_hash=h,
            spec_path=str(spec_path),
            workdir=str(spec.workdir),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
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

    tmp = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    try:
        work = tmp / "work"
        work.mkdir()
        (work / "first_line.py").write_text(FIRST_LINE)
        env = dict(os.environ, CORRAL_HOME=str(tmp / "home"), CORRAL_CONTROLLER_IDLE_EXIT="30")
        env.pop("CORRAL_DATABASE_URL", None)
        direct = statistics.median(measure_direct(work, i) for i in range(args.repeat))
        before_env = None
        if args.baseline_tree is not None:
            before_env = dict(
                env,
                CORRAL_HOME=str(tmp / "home-before"),
                PYTHONPATH=str(args.baseline_tree.resolve() / "src"),
            )
        times: list[float] = []
        before_times: list[float] = []
        for i in range(args.repeat):  # alternating: both see the same machine load
            times.append(measure_corral(work, env, i))
            settle(env["CORRAL_HOME"])
            if before_env is not None:
                before_times.append(measure_corral(work, before_env, i, "before"))
                settle(before_env["CORRAL_HOME"])
        corral = statistics.median(times)
        before = statistics.median(before_times) if before_times else None
        # the comparison: the median of the pairs' differences (each pair ran back to back,
        # under the same load), the first pair left out (each tree's first launch in its
        # home creates the store and starts the controller)
        pairs = list(zip(times, before_times, strict=True))[1:] if before_times else []
        paired = statistics.median(a - b for a, b in pairs) if pairs else None
        for e in (env, before_env):
            if e is not None:
                subprocess.run(
                    [sys.executable, "-m", "corral.cli", "controller", "stop"],
                    env=e,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
        ls_home = tmp / "ls-home"
        fill_store(ls_home, 1000, work / "spec-corral-0.yaml")
        ls_1000 = measure_ls(dict(env, CORRAL_HOME=str(ls_home)), args.repeat)
    finally:
        # the agents of both trees (this one's takes --state-dir before --plan)
        subprocess.run(["pkill", "-f", f"corral.agent .*{re.escape(str(tmp))}"], check=False)
        shutil.rmtree(tmp, ignore_errors=True)

    result = {
        "overhead_s": round(corral - direct, 4),
        "direct_s": round(direct, 4),
        "corral_s": round(corral, 4),
        "ls_1000_s": round(ls_1000, 4),
    }
    if before is not None:
        result["baseline_overhead_s"] = round(before - direct, 4)
    if paired is not None:
        result["paired_diff_s"] = round(paired, 4)
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"launch overhead (median of {args.repeat})")
    for col in ("figure", "corral", "baseline", "target", "ok"):
        t.add_column(col)
    t.add_row(
        "launch -> first line of user code",
        f"{corral:.3f} s",
        f"plain python {direct:.3f} s",
        f"overhead < {TARGET_OVERHEAD_S:.1f} s",
        "yes" if corral - direct < TARGET_OVERHEAD_S else "NO",
    )
    if before is not None:
        t.add_row(
            "  the baseline tree, same run",
            f"{before:.3f} s",
            f"overhead {before - direct:.3f} s",
            "-",
            "-",
        )
    if paired is not None and before is not None:
        t.add_row(
            "  corral minus the baseline, pair by pair",
            f"{paired * 1000:+.0f} ms (median)",
            f"{len(pairs)} pairs",
            "corral no slower (5 % noise)",
            "yes" if paired <= (before - direct) * 0.05 else "NO",
        )
    t.add_row(
        "corral ls --json, 1,000 runs",
        f"{ls_1000 * 1000:.0f} ms",
        "-",
        f"< {TARGET_LS_S * 1000:.0f} ms",
        "yes" if ls_1000 < TARGET_LS_S else "NO",
    )
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
