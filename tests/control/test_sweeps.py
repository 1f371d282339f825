"""Sweeps end to end on the local provider, driven by a real controller: a tiny CPU job whose
loss depends on the swept learning rate. The grid's best trial is the true best; a clearly bad
trial is pruned early (stopped, recorded pruned, not failed); a sweep's trials never spend
past its budget and nothing starts that it cannot pay for; bad sweep files get one line each;
a controller killed mid-sweep and started again finishes it with every trial exactly once."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.errors import BadInput, SpecError
from corral.providers.local import LocalProvider
from corral.service.sweeps import launch_sweep, sweep_status
from corral.store import Store
from support.waiting import wait_until

from .helpers import start_controller

JOB = """\
import os, sys, time
from corral.sdk import report
lr, steps = float(os.environ["LR"]), int(os.environ.get("STEPS", "40"))
for step in range(1, steps + 1):
    time.sleep(float(os.environ.get("PAUSE", "0.1")))
    report(step=step, total=steps, loss=(lr - 0.3) ** 2 + 1.0 / step)
"""


def _sweep(tmp_path: Path, sweep: str, env: str = "", file: str = "corral.yaml") -> Path:
    (tmp_path / "train.py").write_text(JOB)
    body = textwrap.indent(textwrap.dedent(sweep).strip(), "  ")
    path = tmp_path / file
    path.write_text(
        f'name: lr\nenv: {{LR: "0.1"{env}}}\nrun: {sys.executable} train.py\nsweep:\n{body}\n'
    )
    return path


def _drive(store: Store, name: str, price: float = 0.0, timeout: float = 120.0) -> None:
    controller = Controller(
        Context(
            store=store,
            providers={"local": LocalProvider(price_per_hour=price)},
            settings=Settings(tick_seconds=0.1, budget_stop_estimate_s=0.5),
        )
    )

    def done() -> bool:
        controller.tick()
        return store.get_sweep(name).state in ("FINISHED", "STOPPED")

    wait_until(done, timeout, 0.1, lambda: f"sweep {name}: {sweep_status(name).to_json()}")


def test_a_grid_finds_the_true_best_and_prunes_a_clearly_bad_trial(tmp_path: Path) -> None:
    spec = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {values: [0.3, 0.25, 3.0, 0.3001]}}
          metric: {name: loss, goal: minimize}
          search: grid
          max_trials: 4
          prune: {pruner: median, min_trials: 2, warmup_steps: 3}
        """,
    )
    store = Store.open()
    view = launch_sweep(spec, providers={"local": LocalProvider()}, start_controller=False)
    assert view.state == "RUNNING" and view.trials == []
    _drive(store, "lr")
    done = sweep_status("lr")
    assert done.state == "FINISHED" and len(done.trials) == 4
    assert [t.params["env.LR"] for t in done.trials] == [0.3, 0.25, 3.0, 0.3001]
    assert done.best_trial == 0 and done.best_params == {"env.LR": 0.3}
    # the job's webhooks that want it get sweep.finished, on the best trial's run
    [finished] = store.events(done.trials[0].run_id, types=["sweep.finished"])
    assert finished.data["best_params"] == {"env.LR": 0.3} and finished.data["trials"] == 4
    bad = done.trials[2]
    assert bad.state == "pruned", bad
    assert bad.step is not None and bad.step < 40  # stopped early, not run to the end
    assert store.get_run(bad.run_id).state == "STOPPED"
    assert store.events(bad.run_id, types=["sweep.pruned"])
    # each trial's run got its value through its own environment
    for t in done.trials:
        run = store.get_run(t.run_id)
        assert run.spec is not None and run.spec["env"]["LR"] == repr(t.params["env.LR"])
    # the leaderboard, as people and scripts read it
    out = CliRunner().invoke(app, ["sweep", "status", "lr"])
    assert out.exit_code == 0 and "best: trial 0" in out.stdout and "pruned" in out.stdout
    shown = json.loads(CliRunner().invoke(app, ["sweep", "status", "lr", "--json"]).stdout)
    assert [t["best"] for t in shown["trials"]] == [True, False, False, False]
    assert "lr" in CliRunner().invoke(app, ["sweep", "ls"]).stdout


@pytest.mark.slow
def test_the_trials_never_spend_past_the_sweeps_budget(tmp_path: Path) -> None:
    """$0.10 a second; a trial runs about 4 s. The sweep's $2 pays for the trials one at a
    time (each starts capped at what is left, less what the running one may still spend),
    never for one it could not pay for; then the sweep stops, reason budget."""
    spec = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {low: 0.01, high: 1.0, log: true}}
          metric: {name: loss}
          search: random
          max_trials: 20
          max_parallel: 2
          budget: {max_cost_usd: 2}
          prune: {pruner: none}
        """,
    )
    spec.write_text(spec.read_text().replace("run: ", "budget: {max_cost_usd: 2}\nrun: "))
    store = Store.open()
    local = LocalProvider(price_per_hour=360)
    launch_sweep(spec, providers={"local": local}, start_controller=False)
    _drive(store, "lr", price=360, timeout=240)
    done = sweep_status("lr")
    assert done.state == "STOPPED" and done.reason.startswith("budget"), done.reason
    assert 2 <= len(done.trials) < 20
    runs = [store.get_run(t.run_id) for t in done.trials]
    caps = [(r.spec or {})["budget"]["max_cost_usd"] for r in runs]
    assert caps[0] == 2.0 and all(c < 2.0 for c in caps[1:]), caps  # each capped at what was left
    assert sum(r.cost_usd for r in runs) <= 2.0 and done.spent_usd <= 2.0
    assert all(r.cost_usd <= c for r, c in zip(runs, caps, strict=True))
    assert len({t.params["env.LR"] for t in done.trials}) == len(done.trials)


def test_bad_sweep_files_get_one_line_each(tmp_path: Path) -> None:
    bad_path = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {values: [0.1]}, resources.gpuz: {values: [1]}}
          metric: {name: loss}
          search: grid
        """,
        file="bad.yaml",
    )
    with pytest.raises(SpecError, match="gpuz"):
        launch_sweep(bad_path, providers={"local": LocalProvider()}, start_controller=False)
    empty = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {low: 1.0, high: 1.0}}
          metric: {name: loss}
        """,
        file="empty.yaml",
    )
    with pytest.raises(SpecError, match=r"sweep\.parameters.*range is empty"):
        launch_sweep(empty, providers={"local": LocalProvider()}, start_controller=False)
    grid = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {low: 0.1, high: 1.0}}
          metric: {name: loss}
          search: grid
        """,
        file="grid.yaml",
    )
    with pytest.raises(SpecError, match="grid search needs `values`"):
        launch_sweep(grid, providers={"local": LocalProvider()}, start_controller=False)
    poor = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {values: [0.1, 0.2]}}
          metric: {name: loss}
          search: grid
          budget: {max_cost_usd: 1}
        """,
        file="poor.yaml",
    )
    poor.write_text(poor.read_text().replace("run: ", "budget: {max_cost_usd: 5}\nrun: "))
    with pytest.raises(BadInput, match=r"below one trial's expected cost \$5\.00"):
        launch_sweep(
            poor, providers={"local": LocalProvider(price_per_hour=1)}, start_controller=False
        )
    assert Store.open().sweeps() == []
    out = CliRunner().invoke(app, ["sweep", "launch", str(empty)])
    assert out.exit_code != 0 and "range is empty" in out.output and "Traceback" not in out.output
    remote = CliRunner().invoke(app, ["sweep", "ls"], env={"CORRAL_SERVER": "http://127.0.0.1:9"})
    assert remote.exit_code == 2 and "unset CORRAL_SERVER" in remote.output


@pytest.mark.slow
def test_a_controller_killed_mid_sweep_finishes_it_with_every_trial_once(tmp_path: Path) -> None:
    spec = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {values: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}}
          metric: {name: loss}
          search: grid
          max_trials: 6
          max_parallel: 2
          prune: {pruner: none}
        """,
        env=', STEPS: "20"',
    )
    launch_sweep(spec, start_controller=False)
    store = Store.open()
    first = start_controller()
    wait_until(lambda: len(store.trials("lr")) >= 3, 90, 0.1, "three trials started")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    second = start_controller()
    try:
        wait_until(
            lambda: store.get_sweep("lr").state == "FINISHED", 180, 0.2, "the sweep to finish"
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)
    trials = store.trials("lr")
    assert [t.number for t in trials] == list(range(6))
    assert sorted(t.params["env.LR"] for t in trials) == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    runs = [store.get_run(t.run_id) for t in trials]
    assert len({r.id for r in runs}) == 6 and all(r.state == "SUCCEEDED" for r in runs)
    # one run per trial, nothing launched twice
    assert len([r for r in store.list_runs() if r.name == "lr"]) == 6
    assert all(t.state == "complete" for t in trials)
    assert store.get_sweep("lr").best_trial == 2  # lr 0.3


def test_a_metric_no_trial_reports_is_said_once_the_first_trials_ended(tmp_path: Path) -> None:
    spec = _sweep(
        tmp_path,
        """
          parameters: {env.LR: {values: [0.1, 0.2, 0.3]}}
          metric: {name: accuracy, goal: maximize}
          search: grid
          max_parallel: 2
          prune: {pruner: none}
        """,
        env=', STEPS: "3", PAUSE: "0.01"',
    )
    store = Store.open()
    launch_sweep(spec, providers={"local": LocalProvider()}, start_controller=False)
    controller = Controller(
        Context(
            store=store, providers={"local": LocalProvider()}, settings=Settings(tick_seconds=0.1)
        )
    )

    def warned() -> bool:
        controller.tick()
        return "warning:" in store.get_sweep("lr").reason

    # said while trials run, or (when the last trials end in one advance) kept in the reason
    # the finished sweep gives
    wait_until(warned, 60, 0.1, lambda: f"the warning: {sweep_status('lr').to_json()}")
    reason = store.get_sweep("lr").reason
    assert re.search(r"no trial has reported the metric 'accuracy' \([23] ended\)", reason)
    assert "the trials report: loss" in reason
    _drive(store, "lr")
    done = sweep_status("lr")
    assert done.reason.startswith("every trial done; warning: no trial has reported")
    assert done.best_trial is None and {t.state for t in done.trials} == {"failed"}
    warnings = [e for t in done.trials for e in store.events(t.run_id, types=["sweep.warning"])]
    assert len(warnings) == 1
