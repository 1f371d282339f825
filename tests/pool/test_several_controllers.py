"""Several controllers on one Postgres: kill -9 of one, and its runs finish under the other
with every webhook delivered once (counted at a loopback receiver); a cron schedule starts one
run per tick while two controllers watch it. Real processes: controllers, ``corral worker``,
Redis and PostgreSQL on loopback."""

from __future__ import annotations

import itertools
import json
import secrets
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from control.helpers import write_spec
from corral.control.leases import owner_id
from corral.store import Store
from support.controllers import start_controller, stop
from support.pool import Workers, pool_env, scratch_pool
from support.procs import end_processes_under
from support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
TRAINER = Path(__file__).parents[1] / "e2e" / "trainer.py"
ENDED = {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}


class Receiver(BaseHTTPRequestHandler):
    """Counts each webhook by its delivery id (the same for every retry of one event)."""

    got: Counter[str]
    events: dict[str, tuple[str, str]]
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            type(self).got[self.headers["X-Corral-Delivery"]] += 1
            type(self).events[self.headers["X-Corral-Delivery"]] = (body["run"]["id"], body["type"])
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """No access log on the test's stderr."""


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.got, Receiver.events = Counter(), {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()


@pytest.fixture
def team(postgres_url: str, tmp_path: Path, monkeypatch) -> Iterator[dict[str, str]]:
    """What every controller of the team shares: the store, the agent key, short leases."""
    env = {
        "CORRAL_DATABASE_URL": postgres_url,
        "CORRAL_AGENT_KEY": secrets.token_hex(32),
        "CORRAL_CONTROLLER_LEASE": "3",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env


def submit(store: Store, spec: Path) -> str:
    from corral.spec import load_spec, spec_hash

    s = load_spec(spec)
    return store.create_run(
        name=s.name,
        spec=s.model_dump(mode="json"),
        spec_hash=spec_hash(s),
        spec_path=str(spec),
        workdir=str(s.workdir),
    ).id


def test_a_dead_controllers_runs_finish_under_the_other_with_each_webhook_once(
    team: dict[str, str], receiver: str, tmp_path: Path, monkeypatch
) -> None:
    with scratch_pool() as pool:
        env = {**team, **pool_env(pool), "CORRAL_PROVIDERS": "pool"}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        workers = Workers(pool, tmp_path / "machines", fake_gpus="L40S:2")
        homes = {name: tmp_path / f"ctl-{name}" for name in ("a", "b")}
        ctl: dict[str, subprocess.Popen[bytes]] = {}
        try:
            workers.start("m0", "0")
            workers.start("m1", "1")
            work = tmp_path / "work"
            work.mkdir()
            spec = write_spec(
                work,
                f"""
                name: team
                resources: {{gpus: 1}}
                run: {sys.executable} {TRAINER} --total 50 --step-seconds 0.2 --every 5
                notify:
                  webhooks: [{{url: "{receiver}"}}]
                """,
            )
            store = Store.open()
            runs = [submit(store, spec) for _ in range(2)]
            ctl["a"] = start_controller(homes["a"], env)  # A takes both runs
            wait_until(lambda: all(store.get_run(r).state == "RUNNING" for r in runs), 90, 0.2)
            assert {store.get_run(r).lease_owner for r in runs} == {owner_id(homes["a"])}
            ctl["b"] = start_controller(homes["b"], env)
            # B joins: A gives one of its two runs up, B takes it (one each)
            wait_until(
                lambda: (
                    sorted(str(store.get_run(r).lease_owner) for r in runs)
                    == sorted(owner_id(homes[n]) for n in ("a", "b"))
                ),
                30,
                0.2,
                "one run each",
            )
            wait_until(lambda: len(store.events(runs[0], types=["checkpoint.saved"])) >= 2, 60)
            ctl["a"].send_signal(signal.SIGKILL)  # A dies mid-run
            ctl["a"].wait(10)
            for r in runs:
                wait_until(lambda r=r: store.get_run(r).state in ENDED, 120, 0.2)
            final = [store.get_run(r) for r in runs]
            assert [r.state for r in final] == ["SUCCEEDED", "SUCCEEDED"], [r.reason for r in final]
            assert {r.lease_owner for r in final} == {owner_id(homes["b"])}
            for r in runs:  # B re-attached to the running attempts: nothing was relaunched
                assert [a.exit_reason for a in store.attempts(r)] == ["succeeded"]

            def all_sent() -> bool:
                kinds = Counter(kind for _, kind in Receiver.events.values())
                return kinds["run.finished"] == 2

            wait_until(all_sent, 30, 0.2, "every run.finished webhook")
        finally:
            stop(*ctl.values())
            workers.stop_all()
    # every event each run's webhook wanted went out exactly once
    assert max(Receiver.got.values()) == 1, [d for d, n in Receiver.got.items() if n > 1]
    wanted = [
        e
        for r in runs
        for e in Store.open().events(r)
        if e.type
        in ("run.started", "stage.started", "stage.finished", "checkpoint.saved", "run.finished")
    ]
    assert len(Receiver.got) >= len(wanted)


def test_a_cron_schedule_starts_one_run_per_tick_under_two_controllers(
    team: dict[str, str], tmp_path: Path
) -> None:
    from corral.service.schedules import add_schedule

    spec = write_spec(
        tmp_path,
        """
        name: every2s
        run: echo tick
        schedule: {cron: "*/2 * * * * *"}
        """,
    )
    store = Store.open()
    env = {**team, "CORRAL_PROVIDERS": "local"}
    procs = []
    try:
        add_schedule(spec, store=store, start_controller=False)
        procs = [start_controller(tmp_path / f"ctl-{n}", env) for n in ("a", "b")]
        wait_until(lambda: store.get_schedule("every2s").fired >= 5, 60, 0.2)
    finally:
        stop(*procs)
        end_processes_under(tmp_path)  # the last tick's agent serves on for its controller
    ticks = store.schedule_ticks("every2s")
    runs = [r for r in store.list_runs() if r.name == "every2s"]
    started = [t for t in ticks if t.run_id]
    assert len(runs) == len(started) >= 5  # one run per tick, never two
    assert len({t.tick_at for t in ticks}) == len(ticks)
    assert sorted(r.id for r in runs) == sorted(t.run_id for t in started)  # type: ignore[misc]
    gaps = {(b.tick_at - a.tick_at).total_seconds() for a, b in itertools.pairwise(ticks)}
    assert gaps == {2.0}, gaps  # no tick missed, none acted on twice


SWEEP_JOB = """\
import os, time
from corral.sdk import report
lr = float(os.environ["LR"])
for step in range(1, 11):
    time.sleep(0.1)
    report(step=step, total=10, loss=(lr - 0.3) ** 2 + 1.0 / step)
"""


def test_a_sweep_under_two_controllers_starts_each_trial_once(
    team: dict[str, str], tmp_path: Path
) -> None:
    from corral.providers.local import LocalProvider
    from corral.service.sweeps import launch_sweep

    (tmp_path / "train.py").write_text(SWEEP_JOB)
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        f"name: duo\nrun: {sys.executable} train.py\nenv: {{LR: '0.1'}}\n"
        "sweep:\n"
        "  parameters: {env.LR: {values: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}}\n"
        "  metric: {name: loss}\n  search: grid\n  max_parallel: 3\n  prune: {pruner: none}\n"
    )
    store = Store.open()
    launch_sweep(spec, store=store, providers={"local": LocalProvider()}, start_controller=False)
    env = {**team, "CORRAL_PROVIDERS": "local"}
    procs = []
    try:
        procs = [start_controller(tmp_path / f"ctl-{n}", env) for n in ("a", "b")]
        wait_until(lambda: store.get_sweep("duo").state == "FINISHED", 120, 0.2, "the sweep")
    finally:
        stop(*procs)
        end_processes_under(tmp_path)
    trials = store.trials("duo")
    assert [t.number for t in trials] == list(range(6))
    assert sorted(t.params["env.LR"] for t in trials) == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    runs = [r for r in store.list_runs() if r.name == "duo"]
    assert sorted(r.id for r in runs) == sorted(t.run_id for t in trials)  # one run a trial
    assert all(t.state == "complete" for t in trials)
    assert store.get_sweep("duo").best_trial == 2
