"""A machine's boot: from a fresh simulated machine to its agent's first ``/health``, with
corral's own runtime on an image without python and on one whose python is 3.10, against
today's bootstrap (a venv over the image's python 3.11, the controller's wheel installed into
it) on an image that already has python 3.11, in the same run.

    python benchmarks/boot.py [--json] [--repeat 1]

Each machine is the real node bootstrap (``providers/common/node_bootstrap.sh``) run with a
fresh ``CORRAL_NODE_HOME`` and a PATH holding only what the image has (basic tools; no python,
pyenv's 3.10, or a venv of this python without corral). The runtime and the wheel are shipped
through a ``file://`` storage as a launch ships them (the runtime packed beforehand: once per
machine, cached). The baseline's image already holds corral's dependencies (pip installs
corral's wheel with ``--no-index``): today's bootstrap at its fastest, no index downloads.

Figures: ``boot_s_no_python``, ``boot_s_old_python`` (None without a python 3.10 here),
``boot_s_baseline``, their ratios (target <= 1.5), ``runtime_mb`` (shipped once per machine,
target < 150) and ``pack_s`` (the controller's packing, 0 when cached).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from corral import __version__
from corral.agent.boot import Delivered, delivery_env
from corral.providers.common import runtime, wheel
from corral.wire.plan import AgentPlan

TOOLS = ("bash", "sh", "env", "cat", "cp", "mv", "rm", "mkdir", "tar", "gzip", "grep", "cut")
TOOLS += ("uname", "sha256sum", "basename", "dirname", "sleep", "ls", "head", "tail", "sed")
TOKEN = "bench-boot-token"


def image_bin(root: Path, python: Path | None) -> Path:
    bin_dir = root / "image" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (bin_dir / tool).symlink_to(found)
    if python is not None:
        for name in ("python3", "python"):
            (bin_dir / name).write_text(f'#!/bin/sh\nexec {python} "$@"\n')
            (bin_dir / name).chmod(0o755)
    return bin_dir


def image_packages(root: Path) -> Path:
    """The packages of this environment but corral and pip (an image with corral's deps)."""
    deps = root / "image-packages"
    deps.mkdir()
    for folder in {Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages")}:
        for entry in sorted(folder.iterdir()):
            name = entry.name.lower()
            skip = ("corral", "__editable__", "_corral", "pip", "__pycache__")
            if name.startswith(skip) or name.endswith(".pth") or (deps / entry.name).exists():
                continue
            (deps / entry.name).symlink_to(entry)
    return deps


def boot(root: Path, bin_dir: Path, extra: dict[str, str]) -> float:
    """Seconds from the bootstrap's start to the agent's first answer on /health."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = AgentPlan.model_validate(
        {
            "run_id": "run-boot",
            "attempt": 1,
            "workdir": "/work",
            "checkpoint_dir": "/ckpt",
            "state_dir": "/state",
            "devices": [],
            "stages": [{"name": "main", "run": "sleep 30"}],
        }
    )
    script = root / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    env = {
        "PATH": str(bin_dir),
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "CORRAL_NODE_HOME": str(root / "node"),
        **extra,
        **delivery_env(Delivered(plan=plan.model_dump(mode="json"), token=TOKEN)),
        "CORRAL_AGENT_BIND": f"127.0.0.1:{port}",
        "CORRAL_NODE_ROOT": str(root / "root"),
    }
    start = time.perf_counter()
    with open(root / "boot.log", "wb") as log:
        proc = subprocess.Popen(
            [str(bin_dir / "bash"), str(script)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the machine did not boot:\n{(root / 'boot.log').read_text()}")
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/health",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=2,
                )
                if answer.status_code == 200:
                    return time.perf_counter() - start
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def measure(repeat: int) -> dict[str, float | None]:
    work = Path(tempfile.mkdtemp(prefix="corral-bench-boot-"))
    try:
        built = wheel.build(work / "wheels")
        t0 = time.perf_counter()
        rt = runtime.build(built.path)
        pack_s = time.perf_counter() - t0
        shipped = wheel.node_install_env(str(work / "storage"), work / "wheels")
        old = sorted(Path.home().glob(".pyenv/versions/3.10.*/bin/python3.10"))
        venv = work / "py311"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        deps = image_packages(work)
        kinds: dict[str, tuple[Path | None, dict[str, str]]] = {
            "no_python": (None, shipped),
            "old_python": (old[-1] if old else None, shipped),
            "baseline": (
                venv / "bin" / "python",
                {
                    "CORRAL_VERSION": __version__,
                    "CORRAL_WHEEL_URL": shipped["CORRAL_WHEEL_URL"],
                    "CORRAL_WHEEL_SHA256": shipped["CORRAL_WHEEL_SHA256"],
                    "CORRAL_WHEEL_NAME": shipped["CORRAL_WHEEL_NAME"],
                    "CORRAL_PIP_ARGS": "--no-index",
                    "PYTHONPATH": str(deps),
                },
            ),
        }
        best: dict[str, float | None] = {}
        for kind, (python, extra) in kinds.items():
            if kind == "old_python" and python is None:
                best[kind] = None
                continue
            times = []
            for i in range(repeat):
                root = work / f"{kind}-{i}"
                root.mkdir()
                times.append(boot(root, image_bin(root, python), extra))
            best[kind] = min(times)
        base = best["baseline"] or 0.0
        return {
            "boot_s_no_python": round(best["no_python"] or 0.0, 2),
            "boot_s_old_python": None
            if best["old_python"] is None
            else round(best["old_python"], 2),
            "boot_s_baseline": round(base, 2),
            "ratio_no_python": round((best["no_python"] or 0.0) / base, 2),
            "ratio_old_python": None
            if best["old_python"] is None
            else round(best["old_python"] / base, 2),
            "runtime_mb": round(rt.size / 1e6, 1),
            "pack_s": round(pack_s, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    result = measure(max(1, args.repeat))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'machine (image)':44}{'to /health':>12}{'x baseline':>12}")
    rows = (
        ("no python (corral's runtime)", "boot_s_no_python", "ratio_no_python"),
        ("python 3.10 (corral's runtime)", "boot_s_old_python", "ratio_old_python"),
        ("python 3.11, today's venv + wheel (baseline)", "boot_s_baseline", None),
    )
    for label, key, ratio in rows:
        value = result[key]
        shown = "n/a" if value is None else f"{value:.2f} s"
        times = "" if ratio is None or result[ratio] is None else f"{result[ratio]:.2f}x"
        print(f"{label:44}{shown:>12}{times:>12}")
    print(f"runtime shipped once per machine: {result['runtime_mb']} MB (target < 150)")
    print(f"packed by the controller in {result['pack_s']:.2f} s (0 when cached)")


if __name__ == "__main__":
    main()
