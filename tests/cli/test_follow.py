"""Following a run from the CLI: log lines under a live status line in a terminal, plain
lines in a pipe, until the run ends."""

from __future__ import annotations

import io
import time

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


def test_in_a_pipe_the_stopping_line_follows_the_last_log_lines_of_the_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    from datetime import UTC, datetime

    screen = io.StringIO()  # stdout and stderr in one stream: the order a user sees
    console = Console(file=screen, force_terminal=False, highlight=False, width=200)
    monkeypatch.setattr(output.console, "_console", console)
    monkeypatch.setattr(output.err_console, "_console", console)
    store = Store.open()
    run_id = record_run(store)
    store.create_attempt(run_id, 1, provider="local", offer={}, price_per_hour=0.0)
    store.transition(run_id, "RUNNING", "agent ready on local", attempt=1)
    write_log(run_id, 1, "train", "2025-01-01T00:00:00Z step 1\n")

    def controller() -> None:  # as finishing.handle_stopping does it, slowly
        own = Store.open()
        time.sleep(0.3)
        own.transition(run_id, "STOPPING", "all stages succeeded", outcome="SUCCEEDED")
        time.sleep(0.5)  # the final sync copies the stage's last lines, then the bill closes
        write_log(run_id, 1, "train", "2025-01-01T00:00:09Z train: final line\n")
        own.update_attempt(run_id, 1, billed_until=datetime.now(UTC), state="ended")
        time.sleep(0.3)
        own.transition(run_id, "SUCCEEDED", "all stages succeeded")
        own.close()

    thread = threading.Thread(target=controller)
    thread.start()
    try:
        run = follow(run_id, poll_s=0.02, live=False)
    finally:
        thread.join()
    text = screen.getvalue()
    assert run.state == "SUCCEEDED"
    assert text.index("train: final line") < text.index("STOPPING: all stages succeeded"), text
