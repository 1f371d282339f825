"""Cron schedules: which tick a controller acts on and what it does with missed ones (an
injected clock), and ``corral schedule add/ls/rm`` (the CLI on a real store)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.control.scheduling import decide, fire_due
from corral.store import Store
from corral.store.records import ScheduleRecord

T0 = datetime(2026, 1, 2, 2, 0, tzinfo=UTC)


def _schedule(missed: str = "skip", cron: str = "0 * * * *") -> ScheduleRecord:
    return ScheduleRecord(
        name="s",
        cron=cron,
        timezone="UTC",
        missed=missed,
        spec_hash="h",
        spec_path="/x.yaml",
        workdir="/",
        created_at=T0,
        updated_at=T0,
        next_at=T0,
        last_tick_at=None,
        last_run_id=None,
        fired=0,
        skipped=0,
        spec={},
    )


def test_a_tick_on_time_starts_a_run_and_the_next_one_is_an_hour_later() -> None:
    f = decide(_schedule(), T0 + timedelta(seconds=1))
    assert (f.tick_at, f.start_run, f.next_at, f.missed) == (T0, True, T0 + timedelta(hours=1), 0)


@pytest.mark.parametrize("policy,runs", [("skip", False), ("run-once", True)])
def test_ticks_missed_while_everything_was_down_follow_the_policy(policy: str, runs: bool) -> None:
    now = T0 + timedelta(hours=5, minutes=30)  # 02:00 .. 07:00 passed, nobody ran them
    f = decide(_schedule(policy), now)
    assert f.tick_at == T0 + timedelta(hours=5)  # one run at most, for the latest
    assert f.start_run is runs and f.missed == 5
    assert f.next_at == T0 + timedelta(hours=6)


def test_a_late_controller_still_runs_the_latest_tick_when_it_is_on_time() -> None:
    f = decide(_schedule("skip"), T0 + timedelta(hours=3, seconds=20))
    assert (f.tick_at, f.start_run, f.missed) == (T0 + timedelta(hours=3), True, 3)


def test_seconds_first_cron_and_the_timezone() -> None:
    s = _schedule(cron="*/10 * * * * *")
    f = decide(s, T0 + timedelta(seconds=25))
    assert (f.tick_at, f.next_at, f.missed) == (
        T0 + timedelta(seconds=20),
        T0 + timedelta(seconds=30),
        2,
    )


def _spec(
    tmp_path: Path, schedule: str = 'schedule: {cron: "0 2 * * *", missed: run-once}'
) -> Path:
    path = tmp_path / "nightly.yaml"
    path.write_text(f"name: nightly\nrun: echo hi\n{schedule}\n")
    return path


def test_schedule_add_ls_rm_from_the_cli(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_CONTROLLER_IDLE_EXIT", "0")
    runner = CliRunner()
    spec = _spec(tmp_path)
    added = runner.invoke(app, ["schedule", "add", str(spec), "--json"])
    assert added.exit_code == 0, added.output
    view = json.loads(added.stdout)
    assert (view["name"], view["cron"], view["missed"]) == ("nightly", "0 2 * * *", "run-once")
    assert datetime.fromisoformat(view["next_at"]).hour == 2
    again = runner.invoke(app, ["schedule", "add", str(spec)])
    assert again.exit_code == 4 and "--replace" in again.output
    listed = json.loads(runner.invoke(app, ["schedule", "ls", "--json"]).stdout)
    assert [v["name"] for v in listed] == ["nightly"]
    assert "0 2 * * *" in runner.invoke(app, ["schedule", "ls"]).stdout
    assert runner.invoke(app, ["schedule", "rm", "nightly"]).exit_code == 0
    gone = runner.invoke(app, ["schedule", "rm", "nightly"])
    assert gone.exit_code == 3 and "no schedule named 'nightly'" in gone.output
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: plain\nrun: echo hi\n")
    refused = runner.invoke(app, ["schedule", "add", str(plain)])
    assert refused.exit_code == 2 and "has no schedule" in refused.output
    bad = runner.invoke(
        app, ["schedule", "add", str(_spec(tmp_path, 'schedule: {cron: "0 25 * * *"}'))]
    )
    assert bad.exit_code == 2 and "schedule.cron" in bad.output


def test_a_controller_starts_the_due_run_once(tmp_path: Path) -> None:
    from corral.control.context import Context
    from corral.service.schedules import add_schedule

    clock = [T0 - timedelta(minutes=1)]
    store = Store.open(clock=lambda: clock[0])
    add_schedule(_spec(tmp_path), now=clock[0], store=store, start_controller=False)
    ctx = Context(store=store, providers={}, clock=lambda: clock[0])
    assert fire_due(ctx) == 0
    clock[0] = T0 + timedelta(seconds=2)
    assert fire_due(ctx) == 1 and fire_due(ctx) == 0
    [run] = store.list_runs()
    assert run.state == "PENDING" and run.reason.startswith("scheduled: nightly")
    # two days later (everything was down): run-once starts one run for both missed ticks
    clock[0] = T0 + timedelta(days=2, hours=1)
    assert fire_due(ctx) == 1
    assert len(store.list_runs()) == 2
    s = store.get_schedule("nightly")
    assert (s.fired, s.skipped, s.next_at) == (2, 1, T0 + timedelta(days=3))
