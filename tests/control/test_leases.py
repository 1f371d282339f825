"""This controller's leases (control.leases) over many runs: renewed in one statement, and not
read again every tick while nothing can have changed; two controller processes on one
PostgreSQL store sharing stand-in runs, one killed -9."""

from __future__ import annotations

import secrets
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from corral.control.leases import Leases, owner_id
from corral.control.nudges import wake
from corral.store import Store
from corral.testing.standin import StandInServer
from support.controllers import start_controller, stop
from support.leases import says_it_lives
from support.waiting import wait_until

from .standinkit import create_run


def test_a_steady_controller_asks_the_store_a_few_times_a_lease_not_every_tick(
    corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open()
    ids = [create_run(store, f"r{i}", "run: sleep 60\n") for i in range(1200)]
    asked: list[float] = []
    real = store.lease_share
    monkeypatch.setattr(store, "lease_share", lambda *a, **k: asked.append(1) or real(*a, **k))
    now = [0.0]
    leases = Leases(store, "ctl-a", 20.0, clock=lambda: now[0])
    assert leases.refresh(ids) == set(ids)  # 1,200 runs taken (one UPDATE: no id list)
    for _ in range(60):  # 30 s of ticks every 0.5 s
        now[0] += 0.5
        held = leases.refresh(ids)
        assert held == set(ids) and all(leases.holds(rid) for rid in ids[:10])
    # asked every quarter of a lease (5 s), not every tick
    assert len(asked) == 1 + 30 // 5
    new = create_run(store, "new", "run: sleep 60\n")
    now[0] += 0.5
    assert new in leases.refresh([*ids, new])  # a new run is taken at once
    assert len(asked) == 8
    # without the active runs (a tick of tests and embedders) it always asks
    leases.refresh()
    assert len(asked) == 9


@pytest.mark.slow
@pytest.mark.postgres
def test_two_controllers_share_the_runs_and_one_killed_leaves_them_to_the_other(
    standin: StandInServer, postgres_url: str, tmp_path: Path
) -> None:
    """Two controller processes on one PostgreSQL store hold three of six stand-in runs each;
    one is killed -9 mid-run, the other takes its runs over once their leases expire and
    every run finishes, each on its one attempt, launched once."""
    env = {
        "CORRAL_DATABASE_URL": postgres_url,
        "CORRAL_AGENT_KEY": secrets.token_hex(32),  # each talks to the other's agents
        "CORRAL_CONTROLLER_LEASE": "2",
        "CORRAL_PROVIDER_PLUGINS": "standin=corral.testing.standin:StandInProvider",
        "CORRAL_PROVIDERS": "standin",
        "CORRAL_STANDIN_URL": standin.url,
    }
    homes = [tmp_path / "ctl-a", tmp_path / "ctl-b"]
    a, b = owner_id(homes[0]), owner_id(homes[1])
    store = Store.open(postgres_url)
    procs = [start_controller(home, env) for home in homes]
    try:
        ids = [create_run(store, f"team{i}", "run: sleep 4\n") for i in range(6)]
        for p in procs:
            wake(p.pid)

        def owners() -> Counter[str | None]:
            return Counter(store.get_run(rid).lease_owner for rid in ids)

        wait_until(lambda: owners() == {a: 3, b: 3}, 20, 0.1, lambda: f"3 runs each: {owners()}")
        wait_until(lambda: store.count_runs(states=["RUNNING"]) == 6, 20, 0.1, "6 runs RUNNING")
        theirs = [rid for rid in ids if store.get_run(rid).lease_owner == a]
        procs[0].send_signal(signal.SIGKILL)  # A dies with three runs live
        procs[0].wait(10)
        killed = time.monotonic()
        wait_until(lambda: owners() == {b: 6}, 10, 0.1, lambda: f"B holds all: {owners()}")
        assert time.monotonic() - killed < 2 * 2 + 1  # the lease, a quarter, a tick or two
        wait_until(
            lambda: all(store.get_run(rid).state == "SUCCEEDED" for rid in ids),
            30,
            0.2,
            lambda: f"every run finished: {[store.get_run(r).state for r in ids]}",
        )
    finally:
        stop(*procs)
    for rid in ids:  # one attempt each, launched once: B re-attached to A's running machines
        assert [x.exit_reason for x in store.attempts(rid)] == ["succeeded"], rid
    machines = [agent for agent in standin.agents.values() if agent.run_id in set(ids)]
    assert sorted(m.run_id for m in machines) == sorted(ids)
    assert {m.launches for m in machines} == {1}
    assert set(theirs) <= set(ids) and len(theirs) == 3


@pytest.mark.slow
@pytest.mark.postgres
def test_a_controller_that_never_takes_its_share_strands_no_run(
    standin: StandInServer, postgres_url: str, tmp_path: Path
) -> None:
    """B says it lives (its presence renewed) but never takes a run: the controller A takes
    its share of six stand-in runs at once and B's once those have been free for a lease
    (within about two leases), and keeps all six (gives none up to B, which would strand
    them again)."""
    env = {
        "CORRAL_DATABASE_URL": postgres_url,
        "CORRAL_CONTROLLER_LEASE": "2",
        "CORRAL_PROVIDER_PLUGINS": "standin=corral.testing.standin:StandInProvider",
        "CORRAL_PROVIDERS": "standin",
        "CORRAL_STANDIN_URL": standin.url,
    }
    home = tmp_path / "ctl-a"
    a = owner_id(home)
    store = Store.open(postgres_url)
    quit_b = threading.Event()

    def b_lives() -> None:
        while not quit_b.is_set():
            says_it_lives(store, "stuck-b", 2.0)
            quit_b.wait(0.3)

    b = threading.Thread(target=b_lives, daemon=True)
    b.start()
    proc = start_controller(home, env)
    try:
        created = time.monotonic()
        ids = [create_run(store, f"lone{i}", "run: sleep 60\n") for i in range(6)]
        wake(proc.pid)

        def owners() -> Counter[str | None]:
            return Counter(store.get_run(rid).lease_owner for rid in ids)

        wait_until(lambda: owners()[a] >= 3, 20, 0.05, lambda: f"A's share: {owners()}")
        wait_until(lambda: owners() == {a: 6}, 20, 0.05, lambda: f"A holds all: {owners()}")
        assert time.monotonic() - created < 2 * 2 + 2  # free for a lease, a quarter, a tick
        wait_until(lambda: store.count_runs(states=["RUNNING"]) == 6, 30, 0.1, "6 RUNNING")
        until = time.monotonic() + 2 * 2  # two leases more: nothing given up to B
        while time.monotonic() < until:
            assert owners() == {a: 6}
            time.sleep(0.1)
    finally:
        quit_b.set()
        stop(proc)
        b.join(5)
