"""Several controllers on one store sharing a fleet of stand-in runs by their leases
(``benchmarks/scale.py --controllers K [--store postgresql://...]``).

K controller processes (each its own ``CORRAL_HOME``, the daemon's loop at default settings)
on one fresh database (PostgreSQL: a new database on the server of ``--store``, dropped after;
SQLite: a new file), then N runs made as rows (the controllers launch them, as a team's
controllers would). Measured once all N are RUNNING and past their first quiet look, over
the window: CPU seconds per run-hour summed over the controllers, each controller's RSS per
run it holds, the split of the runs among them (each should hold about 1/K), the database's
transactions and rows read per second; then the changes timed to the action (the run leaving
RUNNING) and whether the controller holding the run acted (it polled the agent between the
change and the action, and no other did); then one controller killed -9: the seconds until
each of its runs is held by another (``takeover_s``) and until each was looked at by its new
holder (``takeover_look_s``), with every run's machines counted at the stand-in and in the
store (a launch asked twice for one attempt, or two machines for one attempt, is counted in
``dup_launches``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx
import psutil

PLUGIN = "standin=corral_standin_plugin:StandInProvider"
SETTLE_S = 35.0  # past the first quiet look of every run (30 s)


class StandInLike(Protocol):
    url: str
    dir: Path


@contextlib.contextmanager
def fresh_store(base: str, tmp: Path) -> Iterator[str]:
    """A new empty database on ``base``'s server (PostgreSQL, dropped after) or a new SQLite
    file under ``tmp``."""
    if not base.startswith("postgres"):
        yield f"sqlite:///{tmp / f'shared-{uuid.uuid4().hex[:8]}.db'}"
        return
    import psycopg

    conninfo = "postgresql://" + base.partition("://")[2]
    name = f"corral_scale_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield conninfo.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _db_stats(url: str) -> tuple[int, int]:
    """PostgreSQL: (transactions, rows read) of the database so far; SQLite: zeros."""
    if not url.startswith("postgres"):
        return 0, 0
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        row = c.execute(
            "SELECT xact_commit + xact_rollback, tup_returned + tup_fetched "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _holders(store: Any) -> dict[str, str | None]:
    """Each active run's lease holder, in one query (no run record built: ten thousand)."""
    from corral.store.states import ACTIVE_RUNS_SQL

    with store._db.transaction() as tx:
        rows = tx.tuples(f"SELECT id, lease_owner FROM runs WHERE {ACTIVE_RUNS_SQL}")
    return dict(rows)


class Fleet:
    """K controller processes on one store."""

    def __init__(self, k: int, tmp: Path, env: dict[str, str], script: Path):
        from corral.control.leases import owner_id

        self.homes = [tmp / f"ctl-{i}-{uuid.uuid4().hex[:6]}" for i in range(k)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.owners = [owner_id(h) for h in self.homes]
        for home in self.homes:
            home.mkdir()
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), "--controller-child", str(home / "polls.json")],
                    env={**env, "CORRAL_HOME": str(home)},
                    stdout=subprocess.DEVNULL,
                    stderr=open(home / "controller.err", "wb"),  # noqa: SIM115 - with the process
                )
            )

    def wait_started(self) -> None:
        from corral.control.lock import running_pid

        deadline = time.monotonic() + 60
        for home, proc in zip(self.homes, self.procs, strict=True):
            while running_pid(home) != proc.pid:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"controller did not start: {(home / 'controller.err').read_text()}"
                    )
                time.sleep(0.05)

    def wake(self) -> None:
        from corral.control.nudges import wake

        for p in self.procs:
            if p.poll() is None:
                wake(p.pid)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def polls(self) -> list[dict[str, list[float]]]:
        """Each controller's looks at each agent endpoint (monotonic s; written at its stop)."""
        import json

        out = []
        for home in self.homes:
            f = home / "polls.json"
            out.append(json.loads(f.read_text()) if f.exists() else {})
        return out


def measure_multi(
    n: int,
    k: int,
    base_url: str,
    tmp: Path,
    window: float,
    src: str,
    standin: StandInLike,
    *,
    react: int,
    lease_s: float | None,
    script: Path,
) -> dict[str, float]:
    from corral.spec import load_spec_text, spec_hash
    from corral.store import Store

    tag = f"{n}_x{k}"
    with fresh_store(base_url, tmp) as url:
        pre = "pg_" if url.startswith("postgres") else "sqlite_"
        env = dict(
            os.environ,
            CORRAL_DATABASE_URL=url,
            CORRAL_AGENT_KEY=uuid.uuid4().hex * 2,  # every controller talks to every agent
            CORRAL_CONTROLLER_IDLE_EXIT="600",
            CORRAL_PROVIDER_PLUGINS=PLUGIN,
            CORRAL_PROVIDERS="standin",
            CORRAL_STANDIN_URL=standin.url,
            PYTHONPATH=os.pathsep.join([src, str(standin.dir)]),
        )
        if lease_s is not None:
            env["CORRAL_CONTROLLER_LEASE"] = str(lease_s)
        lease = lease_s if lease_s is not None else 20.0
        store = Store.open(url)  # migrated here, before the controllers start
        fleet = Fleet(k, tmp, env, script)
        out: dict[str, float] = {}
        try:
            fleet.wait_started()
            spec = load_spec_text("name: scale\nrun: sleep 3600\n")
            dumped, digest = spec.model_dump(mode="json"), spec_hash(spec)
            ids: list[str] = []
            # one transaction for all (a commit each took 0.1 s on a loaded machine)
            with store._db.transaction(write=True) as tx:
                while len(ids) < n:
                    rid = store._insert_run(
                        tx,
                        name="scale",
                        spec=dumped,
                        spec_hash=digest,
                        spec_path="x",
                        workdir=str(tmp),
                        now=store._now(),
                    )
                    if rid is not None:  # None: a clash of random ids, made again
                        ids.append(rid)
            submitted_last = time.monotonic()
            fleet.wake()
            last_running = None
            deadline = time.monotonic() + 120 + n * 0.5
            while time.monotonic() < deadline:
                if last_running is None and store.get_run(ids[-1]).state == "RUNNING":
                    last_running = time.monotonic() - submitted_last
                if store.count_runs(states=["RUNNING"]) >= n:
                    break
                time.sleep(0.2)
            else:
                running = store.count_runs(states=["RUNNING"])
                raise SystemExit(f"{running} of {n} runs reached RUNNING under {k} controllers")
            all_running = time.monotonic() - submitted_last
            time.sleep(SETTLE_S)
            procs = [psutil.Process(p.pid) for p in fleet.procs]
            cpu0 = [sum(p.cpu_times()[:2]) for p in procs]
            db0 = _db_stats(url)
            start = time.monotonic()
            rss: list[list[int]] = [[] for _ in procs]
            while time.monotonic() - start < window:
                for i, p in enumerate(procs):
                    rss[i].append(p.memory_info().rss)
                time.sleep(0.5)
            end = time.monotonic()
            cpu = [sum(p.cpu_times()[:2]) - c for p, c in zip(procs, cpu0, strict=True)]
            db1 = _db_stats(url)
            held = Counter(_holders(store).values())
            split = [held.get(o, 0) for o in fleet.owners]
            span = end - start
            out |= {
                f"{pre}ctl_cpu_s_per_run_hour_{tag}": round(sum(cpu) / (n * span / 3600), 3),
                f"{pre}ctl_rss_mib_max_{tag}": round(max(max(r) for r in rss) / 2**20, 1),
                f"{pre}last_running_s_{tag}": round(last_running or all_running, 2),
                f"{pre}all_running_s_{tag}": round(all_running, 2),
                f"{pre}split_min_{tag}": min(split),
                f"{pre}split_max_{tag}": max(split),
                f"{pre}unheld_{tag}": n - sum(split),
                f"{pre}db_xact_per_s_{tag}": round((db1[0] - db0[0]) / span, 1),
                f"{pre}db_rows_read_per_s_{tag}": round((db1[1] - db0[1]) / span),
            }
            for i, (c, r, h) in enumerate(zip(cpu, rss, split, strict=True)):
                out[f"{pre}ctl{i}_runs_{tag}"] = h
                out[f"{pre}ctl{i}_cpu_s_per_run_hour_{tag}"] = round(c / (n * span / 3600), 3)
                out[f"{pre}ctl{i}_rss_mib_{tag}"] = round(max(r) / 2**20, 1)
                if h:
                    out[f"{pre}ctl{i}_kib_per_held_run_{tag}"] = round(max(r) / 1024 / h, 1)
            keys = {r.run_id: r.key for r in store.resources(open_only=True)}
            reacts = _reactions(store, standin, ids, keys, react, fleet.owners)
            victim = max(range(k), key=lambda i: split[i]) if k > 1 else None
            taken: dict[str, float] = {}
            killed_at = 0.0
            if victim is not None:
                owner = fleet.owners[victim]
                # (a run a change just ended may still be held while it is torn down)
                changed = {r.run_id for r in reacts}
                theirs = {
                    rid for rid, o in _holders(store).items() if o == owner and rid not in changed
                }
                keys = {r.run_id: r.key for r in store.resources(open_only=True)}
                fleet.procs[victim].send_signal(signal.SIGUSR2)  # its looks so far
                time.sleep(1.0)
                fleet.procs[victim].send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                fleet.procs[victim].wait()
                deadline = killed_at + 2 * lease + 60
                while len(taken) < len(theirs) and time.monotonic() < deadline:
                    for rid, o in _holders(store).items():
                        if rid in theirs and rid not in taken and o not in (None, owner):
                            taken[rid] = time.monotonic() - killed_at
                    time.sleep(0.2)
                time.sleep(SETTLE_S)  # past the new holders' first quiet looks
                out[f"{pre}takeover_runs_{tag}"] = len(theirs)
                out[f"{pre}takeover_missed_{tag}"] = len(theirs) - len(taken)
                if taken:
                    out[f"{pre}takeover_s_{tag}"] = round(max(taken.values()), 2)
            live = store.count_runs(states=["RUNNING"])
        finally:
            fleet.stop()
        polls = fleet.polls()
        ended = {r.run_id for r in reacts}
        if taken:  # the first look at each taken run by its new holder
            looks = []
            for run_id in taken:
                if run_id not in keys:  # its machine ended meanwhile (nothing to look at)
                    continue
                ep = f"{standin.url}/a/{keys[run_id]}"
                firsts = [
                    t
                    for i, p in enumerate(polls)
                    if i != victim
                    for t in p.get(ep, [])
                    if t > killed_at
                ]
                looks.append(min(firsts) - killed_at if firsts else float("inf"))
            seen = [t for t in looks if t != float("inf")]
            out[f"{pre}takeover_unlooked_{tag}"] = len(looks) - len(seen)
            if seen:
                out[f"{pre}takeover_look_s_{tag}"] = round(max(seen), 2)
        if reacts:
            times = [r.seconds for r in reacts]
            out[f"{pre}max_react_s_{tag}"] = round(max(times), 3)
            out[f"{pre}median_react_s_{tag}"] = round(statistics.median(times), 3)
            out[f"{pre}react_by_holder_{tag}"] = sum(
                r.by_holder(polls, standin.url) for r in reacts
            )
            out[f"{pre}react_count_{tag}"] = len(reacts)
            for r in reacts:
                if r.seconds > 2.0:  # over the target: what each controller did around it
                    print(r.describe(polls, standin.url), file=sys.stderr)
        out |= _duplicates(store, standin, ids, ended, pre, tag)
        out[f"{pre}live_{tag}"] = live
        store.close()
    return out


class Reaction:
    def __init__(
        self, run_id: str, key: str, holder: int | None, changed: float, seconds: float, what: str
    ):
        self.run_id, self.key, self.holder, self.what = run_id, key, holder, what
        self.changed, self.seconds = changed, seconds

    def by_holder(self, polls: list[dict[str, list[float]]], url: str) -> bool:
        """The holder looked at the agent between the change and the action, and no other
        controller did."""
        ep = f"{url}/a/{self.key}"
        acted = self.changed + self.seconds
        lookers = {
            i for i, p in enumerate(polls) if any(self.changed <= t <= acted for t in p.get(ep, []))
        }
        return lookers == {self.holder}

    def describe(self, polls: list[dict[str, list[float]]], url: str) -> str:
        """One line: the reaction and each controller's looks at the run's agent from 35 s
        before the change to 1 s after the action, in seconds from the change."""
        ep = f"{url}/a/{self.key}"
        acted = self.changed + self.seconds
        looks = {
            i: [
                round(t - self.changed, 2)
                for t in p.get(ep, [])
                if self.changed - 35 <= t <= acted + 1
            ]
            for i, p in enumerate(polls)
        }
        busy = {  # each controller's looks at any agent meanwhile: a stalled loop looks at none
            i: sum(self.changed <= t <= acted for ts in p.values() for t in ts)
            for i, p in enumerate(polls)
        }
        return (
            f"slow reaction ({self.what}): run {self.run_id} held by controller {self.holder}, "
            f"acted on {self.seconds:.2f} s after the change; its looks (s from the change) {looks}; all "
            f"looks meanwhile {busy}"
        )


def _reactions(
    store: Any,
    standin: StandInLike,
    ids: list[str],
    keys: dict[str, str],
    count: int,
    owners: list[str],
) -> list[Reaction]:
    """As ``scale._reactions``: half a stage's end, half a preemption notice, one at a time,
    each timed to the run leaving RUNNING; with the controller that held the run."""
    picks = ids[:: max(1, len(ids) // max(1, count))][:count]
    out = []
    with httpx.Client(base_url=standin.url, timeout=30) as http:
        for i, run_id in enumerate(picks):
            owner = store.get_run(run_id).lease_owner
            holder = owners.index(owner) if owner in owners else None
            what = "finish" if i % 2 == 0 else "preempt"
            changed = time.monotonic()
            http.post(f"/admin/{what}/{keys[run_id]}", json={"grace": 5.0})
            deadline = changed + 30
            while store.get_run(run_id).state == "RUNNING" and time.monotonic() < deadline:
                time.sleep(0.02)
            seconds = time.monotonic() - changed
            out.append(Reaction(run_id, keys[run_id], holder, changed, seconds, what))
    return out


def _duplicates(
    store: Any, standin: StandInLike, ids: list[str], ended: set[str], pre: str, tag: str
) -> dict[str, float]:
    """Launches asked twice for one key (the stand-in counts them), more than one resource row
    for one attempt, and runs with more machines than their attempts."""
    listed = httpx.get(f"{standin.url}/admin/instances", timeout=60).json()
    mine = set(ids)
    repeated = sum(i.get("launches", 1) - 1 for i in listed if i["run_id"] in mine)
    machines = Counter(i["run_id"] for i in listed if i["run_id"] in mine)
    rows = Counter((r.run_id, r.attempt) for r in store.resources() if r.run_id in mine)
    attempts = Counter(run_id for run_id, _ in rows)
    extra_rows = sum(c - 1 for c in rows.values())
    # a run nothing happened to has one attempt; a preempted one may have two
    extra_attempts = sum(1 for rid in ids if attempts[rid] > (2 if rid in ended else 1))
    extra_machines = sum(1 for rid in ids if machines[rid] != attempts[rid])
    return {
        f"{pre}dup_launches_{tag}": repeated + extra_rows,
        f"{pre}extra_attempts_{tag}": extra_attempts,
        f"{pre}machines_not_attempts_{tag}": extra_machines,
    }
