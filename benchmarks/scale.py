"""Controller scale: live runs under a real controller process, and the CLI with a long
history.

    python benchmarks/scale.py [--json] [--local 10,100] [--standin 100,1000,10000]
                               [--pull 1000] [--react 20] [--history 100000] [--window 60]
                               [--baseline-src PATH]
    python benchmarks/scale.py --controllers K [--store postgresql://127.0.0.1:5432/test]
                               [--standin 2000] [--react 20] [--lease S] [--json]

1. Live runs. For each scenario, a fresh CORRAL_HOME and a controller in its own process
   (the daemon's loop, default settings: a quiet run whose agent rings the controller's bell
   is looked at every 30 s, any other every 2 s), then N runs (up to 2,000 submitted one
   after another through the service, which launches each first attempt as ``corral launch``
   does; above that made as rows the controller launches):

   * ``--local``: runs of ``run: sleep 3600`` on the local provider, real agents;
   * ``--standin``: runs on the stand-in of ``corral.testing.standin`` (one server process
     answers the agent protocol for every run and rings the bell as agents do, so the machine
     holds ten thousand), registered through ``CORRAL_PROVIDER_PLUGINS``;
   * ``--pull``: the same with ``CORRAL_BELL=off`` (every run pulled every 2 s): the
     same-run baseline of the bell.

   Measured once all N are RUNNING and past their first quiet look, over ``--window``
   seconds: the controller's RSS, its CPU seconds per run-hour, the longest time any run
   waited between two looks (every request the controller makes to an agent's ``/poll`` or
   ``/status`` is timed inside the controller process), and the seconds from the last run's
   submission to its RUNNING state. Then ``--react`` agent-side changes, one at a time on
   runs spread over the N (half a stage ending, half a preemption notice: the agent stops as
   on SIGTERM), each timed to the controller's action (the run leaving RUNNING). Memory per
   run is the RSS slope between the smallest and the largest belled count of a kind.

2. ``corral ls`` (the table), ``corral ls --json`` (every run) and ``corral status RUN`` in a
   fresh process with ``--history`` runs in the store; median of 3.

``--baseline-src PATH``: the same for another tree's ``src`` (the tree before this work:
``git worktree add /tmp/base <commit>``), in the same run: its controller (on the stand-in
scenarios) and its CLI (section 2). JSON keys: ``ctl_kib_per_run_<N>``, ``ctl_rss_mib_<N>``,
``max_poll_gap_s_<N>``, ``last_running_s_<N>``, ``cpu_s_per_run_hour_<N>`` (also as
``ctl_cpu_s_per_run_hour_<N>``), ``max_react_s_<N>``, ``median_react_s_<N>`` per count (local
counts as ``local_<N>``, pulled ones as ``pull_<N>``), ``ctl_cpu_s_per_run_hour`` (the
largest stand-in count), ``ls_<history>_s``, ``ls_json_<history>_s``, ``status_<history>_s``;
``baseline_`` + each. Targets (issues #16, #33): at most 0.3 CPU s per run-hour and under
100 KiB per run at 10,000 runs, every change acted on within 2 s, ``ls`` under 200 ms.

3. ``--controllers K`` (K > 1, or any ``--store``): K controllers on one store sharing the
   ``--standin`` fleets by their leases, and one of them killed -9 (``benchmarks/scale_multi.py``;
   ``--store``: a PostgreSQL server, a fresh database each count; default a shared SQLite
   file). JSON keys (``pg_`` or ``sqlite_``, then ``_<N>_x<K>``): ``ctl_cpu_s_per_run_hour``
   (summed), ``ctl<i>_runs``, ``ctl<i>_kib_per_held_run``, ``split_min``/``split_max``,
   ``max_react_s``, ``median_react_s``, ``react_by_holder``, ``last_running_s``,
   ``takeover_s``, ``takeover_look_s``, ``dup_launches``, ``extra_attempts``,
   ``db_xact_per_s``; sections 1 and 2 are skipped.
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
from scale_multi import PLUGIN, measure_multi

TARGET_KIB_PER_RUN = 100.0
TARGET_LS_S = 0.200
POLL_S = 2.0  # the controller's default quiet interval (Settings.poll_interval_s)
QUIET_S = 30.0  # a belled quiet run's (Settings.quiet_poll_s)
#: past the first quiet look of every run (a belled run is looked at every 30 s from its
#: first look after RUNNING)
SETTLE_BELL_S = 35.0
#: above this many runs they are made as rows (the controller launches them), not submitted
DIRECT_ABOVE = 2000
TARGET_CPU_S_PER_RUN_HOUR = 0.3
TARGET_REACT_S = 2.0


# --- the controller, in its own process -------------------------------------------------------


def controller_child(out: Path) -> None:
    """The daemon's loop (``run_foreground``) with every agent ``/poll`` or ``/status``
    request timed; on SIGTERM (and SIGUSR2) the times go to ``out`` as ``{endpoint:
    [monotonic s, ...]}``."""
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

    def dump(*_: object) -> None:
        out.write_text(json.dumps({k: list(v) for k, v in polls.items()}))

    # SIGUSR2: the times so far (before a kill -9, which leaves no chance to write them)
    signal.signal(signal.SIGUSR2, dump)
    try:
        daemon.run_foreground(log_to=home / "controller.log")
    finally:
        dump()


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
        if not before and not inside:
            continue  # an agent that came up after the window (a run recovered by --react)
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

    def __init__(self, tmp: Path, src: str, *, quiet: bool = False):
        self.dir = Path(tempfile.mkdtemp(prefix="standin-", dir=tmp))
        own = Path(src) / "corral" / "testing" / "standin.py"
        if not own.is_file():
            import corral.testing.standin as mod

            own = Path(mod.__file__)
        # a copy under its own name, importable beside the tree's src
        shutil.copy(own, self.dir / "corral_standin_plugin.py")
        ready = self.dir / "url"
        env = dict(os.environ, PYTHONPATH=src if own.is_relative_to(src) else "")
        # quiet: jobs that print nothing and report no progress (what changes is their
        # state: a stage's end, a preemption); else a log line every 2 s, progress every 5 s
        chatter = ["--log-every-s", "1e9", "--progress-every-s", "1e9"] if quiet else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "corral.testing.standin", "--ready-file", str(ready), *chatter],
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
    kind: str,
    n: int,
    tmp: Path,
    window: float,
    src: str,
    standin: StandIn | None,
    *,
    bell: bool = True,
    react: int = 0,
    chatty: bool = False,
) -> dict[str, float]:
    tag = f"{kind}-{n}-{'bell' if bell else 'pull'}-{chatty}-{abs(hash(src)) % 10000}"
    home = tmp / f"home-{tag}"
    home.mkdir()
    work = tmp / f"work-{tag}"
    work.mkdir()
    env = dict(os.environ, CORRAL_HOME=str(home), CORRAL_CONTROLLER_IDLE_EXIT="600")
    env.pop("CORRAL_DATABASE_URL", None)
    if not bell:
        env["CORRAL_BELL"] = "off"  # every run pulled at the 2 s interval (the old way)
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
        if n > DIRECT_ABOVE:  # rows of their own: the controller launches every first attempt
            from corral.control.nudges import wake
            from corral.spec import load_spec_text, spec_hash

            spec = load_spec_text("name: scale\nrun: sleep 3600\n")
            dumped, digest = spec.model_dump(mode="json"), spec_hash(spec)
            for _ in range(n):
                submitted_last = time.monotonic()
                run = store.create_run(
                    name="scale", spec=dumped, spec_hash=digest, spec_path="x", workdir=str(work)
                )
                ids.append(run.id)
            wake(ctl.pid)
        else:
            for i in range(n):
                submitted_last = time.monotonic()
                text = f"name: scale-{i}\nrun: sleep 3600\n"
                sub = submit_run(text=text, base_dir=work, store=store, start_controller=False)
                ids.append(sub.run.id)
        last_running = None
        deadline = time.monotonic() + 120 + n * 0.1
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
        # past the first looks after RUNNING (a belled run: its first quiet look)
        time.sleep(SETTLE_BELL_S if bell else min(3.0, window / 4))
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
        reacts = _reactions(store, standin, ids, react) if react and standin else []
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
    if chatty and kind == "standin":
        name = f"chatty_{name}"
    if not bell:
        name = f"pull_{name}"
    extra = {f"max_react_s_{name}": round(max(reacts), 3)} if reacts else {}
    if reacts:
        extra[f"median_react_s_{name}"] = round(statistics.median(reacts), 3)
    return extra | {
        f"ctl_rss_mib_{name}": round(max(rss) / 1024, 1),
        f"max_poll_gap_s_{name}": round(_max_gap(polls, start, end), 3),
        f"last_running_s_{name}": round(last_running, 3),
        f"cpu_s_per_run_hour_{name}": round(cpu / (n * (end - start) / 3600), 2),
        f"live_{name}": live,
        "_rss_kib": max(rss),
    }


def _reactions(store, standin: StandIn, ids: list[str], count: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Agent-side changes on ``count`` runs, one at a time (half a stage's end, half a
    preemption notice: the agent stops as on SIGTERM), each timed from the change to the
    controller's action (the run SUCCEEDED, or leaving RUNNING for its recovery)."""
    import httpx

    picks = ids[:: max(1, len(ids) // count)][:count]
    keys = {r.run_id: r.key for r in store.resources() if r.run_id in set(picks)}
    out = []
    with httpx.Client(base_url=standin.url, timeout=30) as http:
        for i, run_id in enumerate(picks):
            what = "finish" if i % 2 == 0 else "preempt"
            changed = time.monotonic()
            http.post(f"/admin/{what}/{keys[run_id]}", json={"grace": 5.0})
            deadline = changed + 30
            while store.get_run(run_id).state == "RUNNING" and time.monotonic() < deadline:
                time.sleep(0.02)
            out.append(time.monotonic() - changed)
    return out


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
    parser.add_argument(
        "--standin", default="1000,10000", help="quiet live runs on the stand-in (belled)"
    )
    parser.add_argument(
        "--chatty", default="1000", help="live stand-in runs that print and report progress"
    )
    parser.add_argument(
        "--pull",
        default="1000",
        help="chatty live stand-in runs with the bell off (the same-run baseline)",
    )
    parser.add_argument("--react", type=int, default=20, help="changes timed per stand-in count")
    parser.add_argument("--history", type=int, default=100000, help="runs in the store for ls")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--baseline-src", type=Path, help="another tree's src, measured too")
    parser.add_argument(
        "--controllers", type=int, default=1, help="controllers sharing one store (section 3)"
    )
    parser.add_argument("--store", help="the shared store: postgresql://HOST:PORT/DB (section 3)")
    parser.add_argument("--lease", type=float, help="CORRAL_CONTROLLER_LEASE, s (section 3)")
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
    pull_counts = sorted(int(c) for c in args.pull.split(",") if c)
    chatty_counts = sorted(int(c) for c in args.chatty.split(",") if c)
    tmp = Path(tempfile.mkdtemp(prefix="corral-scale-"))
    result: dict[str, float] = {}
    if args.controllers > 1 or args.store:
        return _several(args, standin_counts, tmp, here)
    standin: StandIn | None = None
    try:
        for prefix, src in trees:
            if standin is not None:
                standin.close()
            rss: dict[tuple[str, int], int] = {}
            plan = [("standin", n, True, False) for n in standin_counts]
            if not prefix:  # real agents, chatty and pulled runs: this tree only
                plan = (
                    [("local", n, True, True) for n in local]
                    + plan
                    + [("standin", n, True, True) for n in chatty_counts]
                    + [("standin", n, False, True) for n in pull_counts]
                )
            for kind, n, belled, chatty in plan:
                if kind == "standin":  # a fresh stand-in for each count (its agents' rings)
                    if standin is not None:
                        standin.close()
                    standin = StandIn(tmp, src, quiet=not chatty)
                figures = measure_live(
                    kind,
                    n,
                    tmp,
                    args.window,
                    src,
                    standin,
                    bell=belled,
                    react=args.react,
                    chatty=chatty,
                )
                rss_kib = int(figures.pop("_rss_kib"))
                if belled and not (chatty and kind == "standin"):
                    rss[(kind, n)] = rss_kib
                result.update({prefix + k: v for k, v in figures.items()})
            _slopes(rss, result, prefix)
            for n in standin_counts:  # the names the issue gives them
                result[f"{prefix}ctl_cpu_s_per_run_hour_{n}"] = result[
                    f"{prefix}cpu_s_per_run_hour_{n}"
                ]
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


def _several(args: argparse.Namespace, counts: list[int], tmp: Path, src: str) -> int:
    """Section 3: ``--controllers`` on one ``--store``, each count on a fresh database and a
    fresh stand-in."""
    result: dict[str, float] = {"load_1m": round(os.getloadavg()[0], 2)}
    try:
        for n in counts:
            standin = StandIn(tmp, src, quiet=True)
            try:
                result |= measure_multi(
                    n,
                    args.controllers,
                    args.store or "sqlite",
                    tmp,
                    args.window,
                    src,
                    standin,
                    react=args.react,
                    lease_s=args.lease,
                    script=Path(__file__).resolve(),
                )
            finally:
                standin.close()
            result[f"load_1m_after_{n}"] = round(os.getloadavg()[0], 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=None if args.json else 1))
    return 0


def _table(result: dict[str, float], args: argparse.Namespace, local: list[int], si: list[int]):
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title="controller scale (belled runs: 30 s quiet interval; pull_: the bell off, 2 s; "
        "baseline: --baseline-src)"
    )
    for col in ("figure", "corral", "baseline", "target"):
        t.add_column(col)

    def row(label: str, key: str, fmt: str, target: str = "-") -> None:
        if key not in result:
            return
        base = result.get("baseline_" + key)
        shown = fmt.format(result[key])
        t.add_row(label, shown, fmt.format(base) if base is not None else "-", target)

    pulled = [n for n in (int(c) for c in args.pull.split(",") if c)]
    chatty = [n for n in (int(c) for c in args.chatty.split(",") if c)]
    for kind, counts in (("local", local), ("standin", si), ("chatty", chatty), ("pull", pulled)):
        for n in counts:
            name = {
                "standin": str(n),
                "local": f"local_{n}",
                "chatty": f"chatty_{n}",
                "pull": f"pull_chatty_{n}",
            }[kind]
            what = {
                "local": f"{n} live runs (real agents)",
                "standin": f"{n} quiet live runs (stand-in)",
                "chatty": f"{n} chatty live runs (stand-in: a line every 2 s, progress every 5 s)",
                "pull": f"{n} chatty live runs (stand-in, bell off: pulled every 2 s)",
            }[kind]
            row(f"{what}: controller RSS", f"ctl_rss_mib_{name}", "{} MiB")
            row(
                f"{what}: longest wait between two looks",
                f"max_poll_gap_s_{name}",
                "{:.2f} s",
                f"<= {(POLL_S if kind == 'pull' else QUIET_S) + 1:g} s",
            )
            row(
                f"{what}: CPU s per run-hour",
                f"cpu_s_per_run_hour_{name}",
                "{:.2f}",
                f"<= {TARGET_CPU_S_PER_RUN_HOUR:g}" if kind == "standin" else "-",
            )
            row(
                f"{what}: change -> action, longest",
                f"max_react_s_{name}",
                "{:.2f} s",
                f"<= {TARGET_REACT_S:g} s",
            )
            row(f"{what}: change -> action, median", f"median_react_s_{name}", "{:.2f} s")
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
