"""Controller scale: live runs on the local provider under a real controller, and `corral ls`
with a large history.

    python benchmarks/scale.py [--json] [--runs 10,50] [--history 10000]

1. For each count N (default 10 and 50): a fresh CORRAL_HOME, a controller in its own process
   (the daemon's loop: ``Controller(Context(...)).serve()``, default settings, the local
   provider), then N runs of ``run: sleep 20`` submitted one after another through the
   service (which launches each first attempt, as ``corral launch`` does). Measured while all
   N are RUNNING: the controller's RSS, the longest time any run waited between two
   ``/status`` polls (timed inside the controller), and the seconds from the last run's
   submission to its RUNNING state. Per-run memory is the RSS slope between the smallest and
   the largest count (both controllers have polled agents, so both carry the same imports).
2. ``corral ls`` (the table) and ``corral ls --json --limit 50`` in a fresh process with
   --history finished runs in the store (the store filler of launch_overhead.py); median of 3.

JSON keys: ``ctl_kib_per_run_<N>``, ``ctl_rss_mib_<N>``, ``max_poll_gap_s_<N>``,
``last_running_s_<N>`` for each N, ``ls_<history>_s``, ``ls_json_limit_<history>_s``.
Targets (issue #16): under 100 KiB per run; the poll gap within the tick plus 1 s; ls of
10,000 runs under 200 ms.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

TARGET_KIB_PER_RUN = 100.0
TARGET_LS_S = 0.200
JOB = "name: scale-{i}\nrun: sleep 20\n"


# --- the controller, in its own process -------------------------------------------------------


def controller_child(out: Path) -> None:
    """The daemon's controller loop, with every agent's ``/status`` calls timed; on SIGTERM
    the poll times go to ``out`` as ``{endpoint: [monotonic seconds, ...]}``."""
    from corral.control import agent_client
    from corral.control.agent_client import AgentClient
    from corral.control.context import Context, Settings
    from corral.control.controller import Controller
    from corral.control.providers import load_providers
    from corral.store import Store
    from corral.wire.status import AgentStatus

    polls: dict[str, list[float]] = {}

    class TimedClient(AgentClient):
        __slots__ = ()

        def status(self) -> AgentStatus:
            polls.setdefault(self.endpoint, []).append(time.monotonic())
            return super().status()

    # the one shared client, as Context's default factory uses it (a tree from before the
    # shared pool, measured for a baseline, gives each agent a client of its own)
    pool_type = getattr(agent_client, "AgentPool", None)
    pool = pool_type() if pool_type is not None else None
    http = pool._http if pool is not None else None

    def factory(endpoint: str, token: str) -> AgentClient:
        return TimedClient(endpoint, token, client=http)

    providers, _ = load_providers()
    settings = Settings()
    ctx = Context(
        store=Store.open(), providers=providers, settings=settings, client_factory=factory
    )
    controller = Controller(ctx)
    controller.tick()
    (out.parent / "controller.ready").write_text(str(os.getpid()))
    try:
        controller.serve()
    finally:
        out.write_text(json.dumps(polls))
        for client in ctx._clients.values():
            client.close()
        if pool is not None:
            pool.close()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _max_gap(polls: dict[str, list[float]], start: float, end: float) -> float:
    """The longest wait of any agent between two polls within [start, end] (the window's
    edges count: an agent not polled near the end waited until the end)."""
    worst = 0.0
    for times in polls.values():
        before = [t for t in times if t <= start]
        inside = [t for t in times if start < t <= end]
        marks = ([before[-1]] if before else [start]) + inside + [end]
        worst = max(worst, *(b - a for a, b in itertools.pairwise(marks)))
    return worst


def _kill_tree(root: Path) -> None:
    """End the processes this benchmark started (agents and their jobs), by pid."""
    mine = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(root) in part for part in p.info["cmdline"] or []):
            mine.append(p)
            mine.extend(p.children(recursive=True))
    for p in mine:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(mine, timeout=5)


def measure_live(n: int, tmp: Path) -> dict[str, float]:
    home = tmp / f"home-{n}"
    home.mkdir()
    work = tmp / f"work-{n}"
    work.mkdir()
    env = dict(os.environ, CORRAL_HOME=str(home))
    env.pop("CORRAL_DATABASE_URL", None)
    polls_file = home / "polls.json"
    ctl = subprocess.Popen(
        [sys.executable, __file__, "--controller-child", str(polls_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(home / "controller.err", "wb"),  # noqa: SIM115 - closed with the process
    )
    os.environ["CORRAL_HOME"] = str(home)
    try:
        deadline = time.monotonic() + 60
        while not (home / "controller.ready").exists():
            if ctl.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"controller did not start: {(home / 'controller.err').read_text()}"
                )
            time.sleep(0.05)
        from corral.service.submit import submit_run
        from corral.store import Store

        store = Store.open()
        ids = []
        submitted_last = 0.0
        for i in range(n):
            submitted_last = time.monotonic()
            sub = submit_run(
                text=JOB.format(i=i), base_dir=work, store=store, start_controller=False
            )
            ids.append(sub.run.id)
        last_running = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = {r.id: r.state for r in store.list_runs(active_only=True)}
            if last_running is None and states.get(ids[-1]) == "RUNNING":
                last_running = time.monotonic() - submitted_last
            if all(states.get(i) == "RUNNING" for i in ids):
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"not all {n} runs reached RUNNING: {states}")
        # all N live: sample the controller's RSS and note the window the poll gaps cover
        start = time.monotonic()
        rss = []
        while time.monotonic() - start < 5.0:
            rss.append(_rss_kib(ctl.pid))
            time.sleep(0.25)
        end = time.monotonic()
        live = sum(1 for r in store.list_runs(active_only=True) if r.state == "RUNNING")
        store.close()
    finally:
        ctl.send_signal(signal.SIGTERM)
        try:
            ctl.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ctl.kill()
        _kill_tree(tmp / f"home-{n}")
        _kill_tree(work)
    polls = json.loads(polls_file.read_text()) if polls_file.exists() else {}
    return {
        f"ctl_rss_mib_{n}": round(max(rss) / 1024, 1),
        f"max_poll_gap_s_{n}": round(_max_gap(polls, start, end), 3),
        f"last_running_s_{n}": round(last_running or float("nan"), 3),
        f"live_{n}": live,
        "_rss_kib": max(rss),
    }


# --- corral ls with a long history ------------------------------------------------------------


def measure_ls(tmp: Path, history: int) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).parent))
    from launch_overhead import fill_store

    home = tmp / "ls-home"
    home.mkdir()
    spec = tmp / "ls.yaml"
    spec.write_text("name: filler\nrun: sleep 20\n")
    fill_store(home, history, spec)
    env = dict(os.environ, CORRAL_HOME=str(home), COLUMNS="120")
    env.pop("CORRAL_DATABASE_URL", None)

    def timed(*args: str) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "corral.cli", "ls", *args],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return {
        f"ls_{history}_s": round(timed(), 4),
        f"ls_json_limit_{history}_s": round(timed("--json", "--limit", "50"), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--runs", default="10,50", help="live run counts, comma-separated")
    parser.add_argument("--history", type=int, default=10000, help="runs in the store for ls")
    parser.add_argument("--controller-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.controller_child:
        controller_child(args.controller_child)
        return 0
    counts = sorted(int(c) for c in args.runs.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="corral-scale-"))
    result: dict[str, float] = {}
    rss: dict[int, int] = {}
    try:
        for n in counts:
            figures = measure_live(n, tmp)
            rss[n] = int(figures.pop("_rss_kib"))
            result.update(figures)
        if len(counts) > 1:
            lo, hi = counts[0], counts[-1]
            result[f"ctl_kib_per_run_{hi}"] = round((rss[hi] - rss[lo]) / (hi - lo), 1)
        result.update(measure_ls(tmp, args.history))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    from corral.control.context import Settings

    tick = Settings().tick_seconds
    t = Table(title="controller scale (local provider, run: sleep 20)")
    for col in ("figure", "value", "target", "ok"):
        t.add_column(col)
    for n in counts:
        gap = result[f"max_poll_gap_s_{n}"]
        t.add_row(f"{n} live runs: controller RSS", f"{result[f'ctl_rss_mib_{n}']} MiB", "-", "-")
        t.add_row(
            f"{n} live runs: longest wait between two polls",
            f"{gap:.2f} s",
            f"<= tick + 1 s ({tick + 1:g} s)",
            "yes" if gap <= tick + 1 else "NO",
        )
        t.add_row(
            f"{n} live runs: last submit -> RUNNING", f"{result[f'last_running_s_{n}']} s", "-", "-"
        )
    for key, value in result.items():
        if key.startswith("ctl_kib_per_run_"):
            ok = value < TARGET_KIB_PER_RUN
            t.add_row(
                "controller memory per live run",
                f"{value} KiB",
                f"< {TARGET_KIB_PER_RUN:g} KiB",
                "yes" if ok else "NO",
            )
    for key in (f"ls_{args.history}_s", f"ls_json_limit_{args.history}_s"):
        label = (
            "corral ls"
            if key.startswith("ls_") and "json" not in key
            else "corral ls --json --limit 50"
        )
        ok = result[key] < TARGET_LS_S
        t.add_row(
            f"{label}, {args.history:,} runs",
            f"{result[key] * 1000:.0f} ms",
            f"< {TARGET_LS_S * 1000:.0f} ms",
            "yes" if ok else "NO",
        )
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
