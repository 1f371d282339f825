"""Controller scale: live runs under a real controller process, and the CLI with a long
history.

    python benchmarks/scale.py [--json] [--local 10,100] [--standin 100,1000]
                               [--history 10000] [--window 20] [--baseline-src PATH]

1. Live runs. For each scenario, a fresh CORRAL_HOME and a controller in its own process
   (the daemon's loop, default settings: a quiet run is looked at every 2 s), then N runs
   submitted one after another through the service (which launches each first attempt, as
   ``corral launch`` does):

   * ``--local``: runs of ``run: sleep 600`` on the local provider, real agents;
   * ``--standin``: runs on the stand-in of ``corral.testing.standin`` (one server process
     answers the agent protocol for every run, so the machine holds a thousand), registered
     through ``CORRAL_PROVIDER_PLUGINS``.

   Measured once all N are RUNNING, over ``--window`` seconds: the controller's RSS, its CPU
   seconds per run-hour, and the longest time any run waited between two looks (every
   request the controller makes to an agent's ``/poll`` or ``/status`` is timed inside the
   controller process); and the seconds from the last run's submission to its RUNNING state.
   Memory per run is the RSS slope between the smallest and the largest count of a kind.

2. ``corral ls`` (the table), ``corral ls --json`` (every run) and ``corral status RUN`` in a
   fresh process with ``--history`` runs in the store; median of 3.

``--baseline-src PATH``: the same for another tree's ``src`` (the tree before this work:
``git worktree add /tmp/base <commit>``), in the same run: its controller (on the stand-in
scenarios) and its CLI (section 2). JSON keys: ``ctl_kib_per_run_<N>``, ``ctl_rss_mib_<N>``,
``max_poll_gap_s_<N>``, ``last_running_s_<N>``, ``cpu_s_per_run_hour_<N>`` per count (local
counts as ``local_<N>``), ``ctl_cpu_s_per_run_hour`` (the largest stand-in count),
``ls_<history>_s``, ``ls_json_<history>_s``, ``status_<history>_s``; ``baseline_`` + each.
Targets (issue #16): under 100 KiB per run; the poll gap within the interval plus 1 s; ls of
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
POLL_S = 2.0  # the controller's default quiet interval (Settings.poll_interval_s)
PLUGIN = "standin=corral_standin_plugin:StandInProvider"


# --- the controller, in its own process -------------------------------------------------------


def controller_child(out: Path) -> None:
    """The daemon's loop (``run_foreground``) with every agent ``/poll`` or ``/status``
    request timed; on SIGTERM the times go to ``out`` as ``{endpoint: [monotonic s, ...]}``."""
    from array import array

    from corral.control import agent_client, daemon

    polls: dict[str, array] = {}
    # the method every agent request goes through (``_request`` in trees before the typed wire)
    name = "_fetch" if hasattr(agent_client.AgentClient, "_fetch") else "_request"
    real = getattr(agent_client.AgentClient, name)

    def timed(self, method, path, **kw):  # type: ignore[no-untyped-def]
        if path in ("/poll", "/status"):
            polls.setdefault(self.endpoint, array("d")).append(time.monotonic())
        return real(self, method, path, **kw)

    setattr(agent_client.AgentClient, name, timed)
    home = Path(os.environ["CORRAL_HOME"])
    try:
        daemon.run_foreground(log_to=home / "controller.log")
    finally:
        out.write_text(json.dumps({k: list(v) for k, v in polls.items()}))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _max_gap(polls: dict[str, list[float]], start: float, end: float) -> float:
    """The longest wait of any agent between two looks within [start, end] (the window's
    edges count: an agent not looked at near the end waited until the end)."""
    worst = 0.0
    for times in polls.values():
        before = [t for t in times if t <= start]
        inside = [t for t in times if start < t <= end]
        marks = ([before[-1]] if before else [start]) + inside + [end]
        worst = max(worst, *(b - a for a, b in itertools.pairwise(marks)))
    return worst


def _kill_tree(root: Path) -> None:
    """End the processes this benchmark started under ``root`` (agents and their jobs)."""
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


class StandIn:
    """The stand-in server in its own process, and the plugin module a tree loads: the tree's
    own stand-in where it has one (its agents speak that tree's wire), else this tree's."""

    def __init__(self, tmp: Path, src: str):
        self.dir = Path(tempfile.mkdtemp(prefix="standin-", dir=tmp))
        own = Path(src) / "corral" / "testing" / "standin.py"
        if not own.is_file():
            import corral.testing.standin as mod

            own = Path(mod.__file__)
        # a copy under its own name, importable beside the tree's src
        shutil.copy(own, self.dir / "corral_standin_plugin.py")
        ready = self.dir / "url"
        env = dict(os.environ, PYTHONPATH=src if own.is_relative_to(src) else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "corral.testing.standin", "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("the stand-in server did not start")
            time.sleep(0.05)
        self.url = ready.read_text()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def measure_live(
    kind: str, n: int, tmp: Path, window: float, src: str, standin: StandIn | None
) -> dict[str, float]:
    tag = f"{kind}-{n}-{abs(hash(src)) % 10000}"
    home = tmp / f"home-{tag}"
    home.mkdir()
    work = tmp / f"work-{tag}"
    work.mkdir()
    env = dict(os.environ, CORRAL_HOME=str(home), CORRAL_CONTROLLER_IDLE_EXIT="600")
    env.pop("CORRAL_DATABASE_URL", None)
    if kind == "standin":
        assert standin is not None
        env.update(
            CORRAL_PROVIDER_PLUGINS=PLUGIN,
            CORRAL_PROVIDERS="standin",
            CORRAL_STANDIN_URL=standin.url,
        )
        env["PYTHONPATH"] = os.pathsep.join([src, str(standin.dir)])
    else:
        env["CORRAL_PROVIDERS"] = "local"
        env["PYTHONPATH"] = src
    polls_file = home / "polls.json"
    ctl = subprocess.Popen(
        [sys.executable, __file__, "--controller-child", str(polls_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(home / "controller.err", "wb"),  # noqa: SIM115 - closed with the process
    )
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k != "PYTHONPATH"})
    if kind == "standin":
        sys.path.insert(0, str(standin.dir))  # type: ignore[union-attr]
    try:
        from corral.control.lock import running_pid

        deadline = time.monotonic() + 60
        while running_pid(home) != ctl.pid:
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
            text = f"name: scale-{i}\nrun: sleep 600\n"
            sub = submit_run(text=text, base_dir=work, store=store, start_controller=False)
            ids.append(sub.run.id)
        last_running = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if last_running is None and store.get_run(ids[-1]).state == "RUNNING":
                last_running = time.monotonic() - submitted_last
            if store.count_runs(states=["RUNNING"]) >= n:
                if last_running is None:
                    last_running = time.monotonic() - submitted_last
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"not all {n} runs reached RUNNING")
        time.sleep(min(3.0, window / 4))  # past the first looks after RUNNING
        proc = psutil.Process(ctl.pid)
        cpu0 = sum(proc.cpu_times()[:2])
        start = time.monotonic()
        rss = []
        while time.monotonic() - start < window:
            rss.append(_rss_kib(ctl.pid))
            time.sleep(0.5)
        end = time.monotonic()
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        live = store.count_runs(states=["RUNNING"])
        store.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if kind == "standin":
            sys.path.remove(str(standin.dir))  # type: ignore[union-attr]
        ctl.send_signal(signal.SIGTERM)
        try:
            ctl.wait(timeout=60)
        except subprocess.TimeoutExpired:
            ctl.kill()
        if kind == "local":
            _kill_tree(home)
            _kill_tree(work)
    polls = json.loads(polls_file.read_text()) if polls_file.exists() else {}
    name = str(n) if kind == "standin" else f"local_{n}"
    return {
        f"ctl_rss_mib_{name}": round(max(rss) / 1024, 1),
        f"max_poll_gap_s_{name}": round(_max_gap(polls, start, end), 3),
        f"last_running_s_{name}": round(last_running, 3),
        f"cpu_s_per_run_hour_{name}": round(cpu / (n * (end - start) / 3600), 2),
        f"live_{name}": live,
        "_rss_kib": max(rss),
    }


# --- the CLI with a long history --------------------------------------------------------------


def fill(home: Path, n: int, spec: Path) -> str:
    """``n`` finished runs in the store of ``home`` (one transaction for all); the id of one."""
    saved = os.environ.get("CORRAL_HOME")
    os.environ["CORRAL_HOME"] = str(home)
    try:
        from corral.spec import load_spec, spec_hash
        from corral.store import Store

        s = load_spec(spec)
        store = Store.open()
        dumped, h = s.model_dump(mode="json"), spec_hash(s)
        ids = []
        for _ in range(n):
            run = store.create_run(
                name=s.name, spec=dumped, spec_hash=h, spec_path=str(spec), workdir=str(s.workdir)
            )
            ids.append(run.id)
        store.close()
        return ids[n // 2]
    finally:
        if saved is None:
            os.environ.pop("CORRAL_HOME", None)
        else:
            os.environ["CORRAL_HOME"] = saved


def measure_ls(home: Path, history: int, src: str, one: str) -> dict[str, float]:
    env = dict(os.environ, CORRAL_HOME=str(home), COLUMNS="120", PYTHONPATH=src)
    env.pop("CORRAL_DATABASE_URL", None)

    def timed(*args: str) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "corral.cli", *args],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return {
        f"ls_{history}_s": round(timed("ls"), 4),
        f"ls_json_{history}_s": round(timed("ls", "--json"), 4),
        f"status_{history}_s": round(timed("status", one, "--json"), 4),
    }


def _slopes(rss: dict[tuple[str, int], int], result: dict[str, float], prefix: str) -> None:
    for kind in ("local", "standin"):
        counts = sorted(n for k, n in rss if k == kind)
        if len(counts) > 1:
            lo, hi = counts[0], counts[-1]
            name = str(hi) if kind == "standin" else f"local_{hi}"
            slope = (rss[(kind, hi)] - rss[(kind, lo)]) / (hi - lo)
            result[f"{prefix}ctl_kib_per_run_{name}"] = round(slope, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--local", default="10,100", help="live runs of real agents")
    parser.add_argument("--standin", default="100,1000", help="live runs on the stand-in")
    parser.add_argument("--history", type=int, default=10000, help="runs in the store for ls")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured")
    parser.add_argument("--baseline-src", type=Path, help="another tree's src, measured too")
    parser.add_argument("--controller-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--fill-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.controller_child:
        controller_child(args.controller_child)
        return 0
    if args.fill_child:
        home, count, spec = args.fill_child
        print(fill(Path(home), int(count), Path(spec)))
        return 0
    here = str(Path(__file__).resolve().parent.parent / "src")
    trees = [("", here)] + ([("baseline_", str(args.baseline_src))] if args.baseline_src else [])
    local = sorted(int(c) for c in args.local.split(",") if c)
    standin_counts = sorted(int(c) for c in args.standin.split(",") if c)
    tmp = Path(tempfile.mkdtemp(prefix="corral-scale-"))
    result: dict[str, float] = {}
    standin: StandIn | None = None
    try:
        for prefix, src in trees:
            if standin is not None:
                standin.close()
            standin = StandIn(tmp, src) if standin_counts else None
            rss: dict[tuple[str, int], int] = {}
            plan = [("standin", n) for n in standin_counts]
            if not prefix:  # real agents: this tree only (the baseline is the stand-in's)
                plan = [("local", n) for n in local] + plan
            for kind, n in plan:
                figures = measure_live(kind, n, tmp, args.window, src, standin)
                rss[(kind, n)] = int(figures.pop("_rss_kib"))
                result.update({prefix + k: v for k, v in figures.items()})
            _slopes(rss, result, prefix)
            if standin_counts:
                top = standin_counts[-1]
                result[f"{prefix}ctl_cpu_s_per_run_hour"] = result[
                    f"{prefix}cpu_s_per_run_hour_{top}"
                ]
        spec = tmp / "ls.yaml"
        spec.write_text("name: filler\nrun: sleep 20\n")
        for prefix, src in trees:
            # each tree's own store (its schema), filled by that tree's code
            ls_home = tmp / f"ls-home{prefix}"
            ls_home.mkdir()
            filled = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--fill-child",
                    str(ls_home),
                    str(args.history),
                    str(spec),
                ],
                check=True,
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONPATH=src),
            )
            one = filled.stdout.split()[-1]
            figures = measure_ls(ls_home, args.history, src, one)
            result.update({prefix + k: v for k, v in figures.items()})
    finally:
        if standin is not None:
            standin.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return 0
    _table(result, args, local, standin_counts)
    return 0


def _table(result: dict[str, float], args: argparse.Namespace, local: list[int], si: list[int]):
    from rich.console import Console
    from rich.table import Table

    t = Table(title="controller scale (2 s quiet interval; baseline: --baseline-src)")
    for col in ("figure", "corral", "baseline", "target"):
        t.add_column(col)

    def row(label: str, key: str, fmt: str, target: str = "-") -> None:
        if key not in result:
            return
        base = result.get("baseline_" + key)
        shown = fmt.format(result[key])
        t.add_row(label, shown, fmt.format(base) if base is not None else "-", target)

    for kind, counts in (("local", local), ("standin", si)):
        for n in counts:
            name = str(n) if kind == "standin" else f"local_{n}"
            what = f"{n} live runs ({'real agents' if kind == 'local' else 'stand-in'})"
            row(f"{what}: controller RSS", f"ctl_rss_mib_{name}", "{} MiB")
            row(
                f"{what}: longest wait between two looks",
                f"max_poll_gap_s_{name}",
                "{:.2f} s",
                f"<= {POLL_S + 1:g} s",
            )
            row(f"{what}: CPU s per run-hour", f"cpu_s_per_run_hour_{name}", "{:.2f}")
            row(f"{what}: last submit -> RUNNING", f"last_running_s_{name}", "{:.2f} s")
        if counts:
            hi = counts[-1]
            name = str(hi) if kind == "standin" else f"local_{hi}"
            row(
                f"controller memory per live run ({kind}, {counts[0]} -> {hi})",
                f"ctl_kib_per_run_{name}",
                "{} KiB",
                f"< {TARGET_KIB_PER_RUN:g} KiB",
            )
    h = args.history
    row(f"corral ls, {h:,} runs", f"ls_{h}_s", "{:.3f} s", f"< {TARGET_LS_S:g} s")
    row(f"corral ls --json, {h:,} runs", f"ls_json_{h}_s", "{:.3f} s")
    row(f"corral status RUN, {h:,} runs", f"status_{h}_s", "{:.3f} s")
    Console().print(t)


if __name__ == "__main__":
    sys.exit(main())
