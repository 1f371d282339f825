"""`corral ls` in a narrow terminal: run ids whole, the reason on one line, no bookkeeping."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.store import Store


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "110")
    from corral.cli import output

    monkeypatch.setattr(output.console, "_console", None)  # re-created at the new width


def _running(store: Store, name: str, reason: str) -> str:
    run_id = store.create_run(name=name, spec={}, spec_hash="h", spec_path="c.yaml", workdir="/").id
    store.transition(run_id, "RUNNING", reason, provider="local", attempt=1)
    return run_id


def test_ids_are_never_cut_and_the_reason_stays_on_one_line(narrow) -> None:
    store = Store.open()
    long_id = _running(store, "a-rather-long-run-name-for-testing-ids", "agent ready on local")
    other = _running(store, "short", "waiting for capacity: " + "fake: no capacity; " * 8)
    result = CliRunner().invoke(app, ["ls"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3  # the header and one line per run: nothing wraps
    assert long_id in result.stdout and other in result.stdout
    assert all(len(line.rstrip()) <= 110 for line in lines), lines
    (short,) = [line for line in lines if line.startswith(other)]
    assert short.rstrip().endswith("…")  # the long reason is cut, visibly


def test_a_running_run_shows_where_it_runs_not_the_agent_handshake(narrow) -> None:
    store = Store.open()
    _running(store, "r", "agent ready on local")
    out = CliRunner().invoke(app, ["ls"]).stdout
    assert "agent ready" not in out and "running on local" in out
