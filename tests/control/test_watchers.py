"""Budget, deadline and idle watchers, with an in-process controller over real agents."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from corral import paths
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.control.cost import stop_estimate
from corral.control.watchers.idle import activity
from corral.providers.fake import FakeProvider
from corral.providers.local.provider import LocalProvider
from corral.store import Store
from corral.wire.status import AgentStatus

from .helpers import submit, tick_until, write_spec

pytestmark = pytest.mark.slow


def drive(
    store: Store,
    run_id: str,
    *,
    price: float = 0.0,
    settings: Settings | None = None,
    timeout: float = 60.0,
):
    provider = LocalProvider(price_per_hour=price)
    controller = Controller(
        Context(
            store=store,
            providers={"local": provider},
            settings=settings or Settings(tick_seconds=0.1),
        )
    )
    return tick_until(controller, store, run_id, lambda run: run.terminal, timeout)


TRAP_SCRIPT = """\
import signal, sys, time
def on_term(*_):
    print("saving", flush=True)
    sys.exit(75)
signal.signal(signal.SIGTERM, on_term)
print("up", flush=True)
time.sleep(120)
"""


def trap_job(tmp_path: Path) -> str:
    script = tmp_path / "job.py"
    script.write_text(TRAP_SCRIPT)
    return f"{sys.executable} {script}"


def test_budget_warns_once_then_stops_gracefully_at_the_cap(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        f"""
        name: capped
        budget: {{max_cost_usd: 4.0, warn_at: 0.5}}
        run: {trap_job(tmp_path)}
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    settings = Settings(tick_seconds=0.1, budget_stop_estimate_s=0.5)
    run = drive(store, run_id, price=3600.0, settings=settings)  # $1 a second
    assert run.state == "STOPPED" and run.reason == "budget"
    warnings = store.events(run_id, types=["budget.warning"])
    assert len(warnings) == 1 and warnings[0].data["fraction"] >= 0.5
    # the stop was graceful: the job saw SIGTERM and said so before the machine went away
    text = (paths.run_dir(run_id) / "logs" / "a1" / "main.log").read_text()
    assert "saving" in text
    # final cost lands on the cap: within one tick plus the stop estimate (at $1/s)
    assert 4.0 - 1.0 <= run.cost_usd <= 4.0 + 1.0, run.cost_usd


def test_the_budget_stop_learns_a_slow_teardown_and_keeps_the_bill_under_the_cap(
    tmp_path: Path,
) -> None:
    """A cloud whose teardown takes 2 s at $1/s: the first stop, planned with a 0.5 s
    estimate, overshoots the cap; the stop time observed is learned, and the next run's stop
    comes early enough that its whole bill stays under the cap."""
    cloud = {
        "launch_delay_s": 0,
        "terminate_delay_s": 2.0,
        "offers": [{"id": "slow-cpu", "region": "r1", "gpu_count": 0, "on_demand_price": 3600.0}],
    }
    store = Store.open()
    controller = Controller(
        Context(
            store=store,
            providers={"fake": FakeProvider(cloud)},
            settings=Settings(tick_seconds=0.1, budget_stop_estimate_s=0.5),
        )
    )
    spec = write_spec(
        tmp_path,
        f"""
        name: capped
        budget: {{max_cost_usd: 4.0}}
        resources: {{spot: false}}
        run: {trap_job(tmp_path)}
    """,
    )
    first = tick_until(controller, store, submit(spec), lambda run: run.terminal, 60)
    assert first.state == "STOPPED" and first.reason == "budget"
    assert first.cost_usd > 4.0 + 1.0, first.cost_usd  # the fixed estimate overshoots
    learned = stop_estimate(controller.ctx, "fake")
    assert 2.0 <= learned < 10.0, learned
    second = tick_until(controller, store, submit(spec), lambda run: run.terminal, 60)
    assert second.state == "STOPPED" and second.reason == "budget"
    assert 4.0 - learned - 1.0 <= second.cost_usd <= 4.0, second.cost_usd
    # what was learned outlives the controller
    fresh = Context(store=store, providers={}, settings=Settings(budget_stop_estimate_s=0.5))
    assert stop_estimate(fresh, "fake") >= learned


def test_deadline_stops_the_run_with_reason_deadline(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        f"""
        name: late
        limits: {{max_runtime: 2s}}
        run: {trap_job(tmp_path)}
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    started = time.monotonic()
    run = drive(store, run_id)
    assert run.state == "STOPPED" and run.reason == "deadline"
    assert time.monotonic() - started < 30
    assert [e.type for e in store.events(run_id, types=["deadline.stop"])] == ["deadline.stop"]


def test_a_stalled_gpu_job_is_stopped_as_idle(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:1")  # fake GPUs report 0% utilisation
    spec = write_spec(
        tmp_path,
        f"""
        name: stalled
        resources: {{gpus: "L40S:1"}}
        limits: {{idle_timeout: 2s}}
        stages:
          - name: train
            gpus: 1
            run: {sys.executable} -c "from corral.sdk import report; report(step=1, total=9); import time; time.sleep(120)"
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    run = drive(store, run_id)
    assert run.state == "STOPPED" and run.reason == "idle"


def test_progress_resets_the_idle_timer(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:1")
    loop = (
        "from corral.sdk import report; import time\\n"
        "for i in range(12):\\n    report(step=i, total=12); time.sleep(0.4)"
    )
    script = tmp_path / "steady.py"
    script.write_text(loop.replace("\\n", "\n"))
    spec = write_spec(
        tmp_path,
        f"""
        name: steady
        resources: {{gpus: "L40S:1"}}
        limits: {{idle_timeout: 2s}}
        stages:
          - name: train
            gpus: 1
            run: {sys.executable} {script}
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    # progress events reach the controller every second: one per agent progress interval
    run = drive(store, run_id)
    assert run.state == "SUCCEEDED", run.reason


def _status(stages: list[dict], gpus: list[dict]) -> AgentStatus:
    return AgentStatus(run_id="r", attempt=1, phase="running", stages=stages, gpus=gpus)


def test_activity_rules() -> None:
    running = [{"name": "t", "state": "running", "progress": {"step": 3}}]
    idle_gpu = _status(running, [{"id": "0", "utilization_pct": 0.0}])
    assert activity(idle_gpu, 5.0).busy is False
    busy_gpu = _status(running, [{"id": "0", "utilization_pct": 80.0}])
    assert activity(busy_gpu, 5.0).busy is True
    nothing_running = _status([{"name": "t", "state": "succeeded"}], [])
    assert activity(nothing_running, 5.0).busy is False
    cpu_no_reports = _status([{"name": "t", "state": "running", "progress": None}], [])
    assert activity(cpu_no_reports, 5.0).busy is True


def test_cpu_and_memory_of_the_stages_are_work() -> None:
    """A stage without progress reports and with idle GPUs is busy while its processes use
    CPU (another 5 % of a core over the window) or move their memory; quiet, it is idle."""

    def seen(cpu_s: float, rss_mb: float, limit: float = 60.0):
        stage = {"name": "t", "state": "running", "cpu_s": cpu_s, "rss_mb": rss_mb}
        return activity(_status([stage], [{"id": "0", "utilization_pct": 0.0}]), 5.0, limit)

    base = seen(10.0, 100.0)
    assert base.busy is False and "CPU under 5% of a core" in base.why
    assert seen(10.5, 110.0).token == base.token  # a little CPU, a little memory: no work
    assert seen(13.0, 100.0).token != base.token  # 3 CPU seconds within a 60 s window: work
    assert seen(10.0, 400.0).token != base.token  # 300 MiB more memory: work
    # no GPU, no report, but processes to measure: judged by them, not "always busy"
    quiet = activity(_status([{"name": "t", "state": "running", "cpu_s": 1.0}], []), 5.0)
    assert quiet.busy is False and quiet.why.startswith("no progress report and the stages' CPU")


def test_a_cpu_bound_stage_with_idle_gpus_is_not_stopped_as_idle(
    tmp_path: Path, monkeypatch
) -> None:
    """Busy on the CPU for 8 s, GPUs at 0 %, no progress report, an idle limit of 5 s: it ends
    on its own (the stalled job above, asleep, is stopped)."""
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:1")
    script = tmp_path / "crunch.py"
    script.write_text(
        "import time\nend = time.time() + 8\nwhile time.time() < end:\n    sum(range(10000))\n"
    )
    spec = write_spec(
        tmp_path,
        f"""
        name: crunching
        resources: {{gpus: "L40S:1"}}
        limits: {{idle_timeout: 5s}}
        stages:
          - name: train
            gpus: 1
            run: {sys.executable} {script}
    """,
    )
    run_id = submit(spec)
    run = drive(Store.open(), run_id)
    assert run.state == "SUCCEEDED", run.reason
