"""A controller process with a few hundred live runs (machines and agents of the stand-in in
corral.testing.standin, one server for all): no run waits longer than its interval to be
looked at, a preemption is acted on within its interval, and a budget cap holds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.control.lock import running_pid
from corral.store import Store
from corral.testing.standin import StandInProvider, StandInServer
from support.waiting import wait_until

from .standinkit import create_run

pytestmark = pytest.mark.slow

RUNS = 300
POLL_S = 2.0  # a quiet run's interval
SLACK_S = 1.0  # the benchmark's target: the interval plus 1 s
PRICE = 36.0  # $/h of a stand-in machine: $0.01 a second


def test_a_few_hundred_live_runs_are_each_looked_at_within_their_interval(
    standin: StandInServer, corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_PROVIDER_PLUGINS", "standin=corral.testing.standin:StandInProvider")
    monkeypatch.setenv("CORRAL_PROVIDERS", "standin")
    monkeypatch.setenv("CORRAL_STANDIN_URL", standin.url)
    monkeypatch.setenv("CORRAL_STANDIN_PRICE", str(PRICE))
    monkeypatch.setenv("CORRAL_BELL", "off")  # pulled: every run at the 2 s interval
    # stops on the stand-in take a moment: what the budget watcher reserves for one
    (corral_home / "stop-times.json").write_text(json.dumps({"standin": [0.5] * 5}))
    store = Store.open()
    ids = [create_run(store, f"many{i}", "run: sleep 3600\n") for i in range(RUNS)]
    capped = create_run(store, "capped", "run: sleep 3600\nbudget: {max_cost_usd: 0.25}\n")
    log = corral_home / "controller-test.log"
    with open(log, "ab") as out:
        ctl = subprocess.Popen(
            [sys.executable, "-m", "corral.control", "--poll-interval", str(POLL_S)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: running_pid(corral_home) == ctl.pid, 20, message="the controller")
        wait_until(
            lambda: store.count_runs(states=["RUNNING"]) >= RUNS,
            60,
            0.2,
            lambda: (
                f"{RUNS} runs RUNNING; {store.count_runs(states=['RUNNING'])} are\n"
                + log.read_text()[-2000:]
            ),
        )
        provider = StandInProvider(standin.url)
        start = standin.clock()
        time.sleep(1.0)
        victim = ids[RUNS // 2]
        inst = provider.find(store.resources(run_id=victim)[0].key)
        assert inst is not None
        preempted_at = time.time()
        provider.preempt(inst, grace=0.5)
        # the agent stops as on SIGTERM: the next look sees it and the run recovers
        wait_until(lambda: store.get_run(victim).attempt == 2, 15, 0.05, "the recovery")
        recovering = [
            e.ts.timestamp()
            for e in store.events(victim, types=["run.state"])
            if e.data.get("to") == "RECOVERING"
        ]
        acted_s = recovering[0] - preempted_at
        time.sleep(max(0.0, 6.0 - (standin.clock() - start)))
        end = standin.clock()
        gaps = standin.poll_gaps(start, end)
        keys = {r.key: r.run_id for r in store.resources() if r.attempt == 1}
        worst = max(
            (g["max_gap"], key)
            for key, g in gaps.items()
            if keys.get(key) not in (victim, capped, None)
        )
        assert worst[0] <= POLL_S + SLACK_S, (worst, log.read_text()[-2000:])
        assert acted_s <= POLL_S + SLACK_S, acted_s
        # the capped run: stopped by its budget, its bill under the cap
        wait_until(lambda: store.get_run(capped).terminal, 40, 0.2, "the budget stop")
        run = store.get_run(capped)
        assert (run.state, run.reason) == ("STOPPED", "budget")
        assert run.cost_usd <= 0.25, run.cost_usd
        wait_until(lambda: store.get_run(victim).state == "RUNNING", 15, 0.1, "attempt 2")
        assert store.count_runs(states=["FAILED"]) == 0
    finally:
        ctl.terminate()
        ctl.wait(30)
    assert "Traceback" not in log.read_text()
    print(
        f"{RUNS} live runs: longest wait between two looks {worst[0]:.2f} s (interval "
        f"{POLL_S:g} s); preemption acted on in {acted_s:.2f} s; capped run ${run.cost_usd:.3f}"
    )
