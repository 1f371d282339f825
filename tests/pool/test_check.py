"""``corral pool check`` on this box with a real Redis and store: each check's verdict in one
line; a skewed clock, a broker that does not answer and a box without GPUs are said, and a
failed check fails the command."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from corral.cli.app import app
from corral.service.pool_check import check
from support.pool import scratch_pool


def test_a_healthy_box_passes_every_check(corral_home: Path) -> None:
    with scratch_pool() as settings:
        report = check(settings, environ={"CORRAL_FAKE_GPUS": "L4:2"})
    levels = {c.name: c.level for c in report.checks}
    assert report.ok and levels == dict.fromkeys(("gpus", "broker", "clock", "store", "disk"), "ok")
    detail = {c.name: c.detail for c in report.checks}
    assert "L4 x2" in detail["gpus"] and "Redis" in detail["broker"] and "schema" in detail["store"]


def test_a_skewed_clock_a_dead_broker_and_no_gpus_are_said(corral_home: Path) -> None:
    with scratch_pool() as settings:
        skewed = check(settings, environ={}, clock=lambda: time.time() + 30)
        dead = check(replace(settings, broker_url="redis://127.0.0.1:1/0"), environ={})
    by = {c.name: c for c in skewed.checks}
    assert by["clock"].level == "fail" and "ahead of the broker's clock" in by["clock"].detail
    assert by["gpus"].level == "warn" and "CPU work only" in by["gpus"].detail
    assert not skewed.ok
    by = {c.name: c for c in dead.checks}
    assert by["broker"].level == "fail" and "127.0.0.1:1" in by["broker"].detail
    assert by["store"].level == "ok"  # one failure never stops the other checks


def test_the_command_prints_json_and_fails_on_a_failed_check(
    corral_home: Path, monkeypatch
) -> None:
    with scratch_pool() as settings:
        monkeypatch.setenv("CORRAL_FAKE_GPUS", "L4:1")
        out = CliRunner().invoke(app, ["pool", "check", "--broker", settings.broker_url, "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["ok"] is True
    out = CliRunner().invoke(app, ["pool", "check", "--broker", "redis://127.0.0.1:1/0"])
    assert out.exit_code == 1 and "FAIL broker" in out.output
