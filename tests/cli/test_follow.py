"""Following a run from the CLI: log lines under a live status line in a terminal, plain
lines in a pipe, until the run ends."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from corral.cli import output
from corral.cli.follow import follow
from corral.store import Store
from service.helpers import record_run, write_log


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_following_prints_the_logs_and_returns_the_ended_run(
    terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=terminal, highlight=False, width=100)
    monkeypatch.setattr(output.console, "_console", console)
    store = Store.open()
    run_id = record_run(store)
    write_log(run_id, 1, "train", "2025-01-01T00:00:00Z hello from train\n")
    store.transition(run_id, "CANCELLED", "user")
    run = follow(run_id, poll_s=0.01)
    assert (run.id, run.state) == (run_id, "CANCELLED")
    assert "hello from train" in screen.getvalue()
