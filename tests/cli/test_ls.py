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


def _finished(store: Store, name: str) -> str:
    run_id = store.create_run(name=name, spec={}, spec_hash="h", spec_path="c.yaml", workdir="/").id
    store.transition(run_id, "FAILED", "it broke")
    return run_id


def test_the_table_pages_at_fifty_and_says_how_many_more_and_how_to_see_them(narrow) -> None:
    from corral.cli.ls import DEFAULT_LIMIT

    store = Store.open()
    finished = [_finished(store, f"old-{i}") for i in range(DEFAULT_LIMIT + 10)]
    runner = CliRunner()
    result = runner.invoke(app, ["ls"])  # no active run: every run, the newest 50
    assert result.exit_code == 0, result.output
    shown = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert shown == finished[::-1][:DEFAULT_LIMIT]
    assert "10 more: corral ls --limit 60" in result.stderr
    result = runner.invoke(app, ["ls", "--limit", "5"])
    assert len(result.stdout.splitlines()) == 6 and "55 more: corral ls --limit 60" in result.stderr
    result = runner.invoke(app, ["ls", "--all"])
    assert len(result.stdout.splitlines()) == 61 and "more" not in result.stderr
    result = runner.invoke(app, ["ls", "--state", "failed", "--limit", "59"])
    assert "1 more: corral ls --state failed --limit 60" in result.stderr
    # active runs come first and alone, paged the same way
    running = [_running(store, f"live-{i}", "agent ready on local") for i in range(3)]
    result = runner.invoke(app, ["ls", "-n", "2"])
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == running[::-1][:2]
    assert "1 more: corral ls --limit 3" in result.stderr


def test_ls_json_prints_every_run_unless_a_limit_is_given() -> None:
    import json

    from corral.cli.ls import DEFAULT_LIMIT

    store = Store.open()
    for i in range(DEFAULT_LIMIT + 5):
        _finished(store, f"old-{i}")
    runner = CliRunner()
    result = runner.invoke(app, ["ls", "--json"])
    assert len(json.loads(result.stdout)) == DEFAULT_LIMIT + 5 and not result.stderr
    result = runner.invoke(app, ["ls", "--json", "--limit", "3"])
    assert len(json.loads(result.stdout)) == 3 and not result.stderr


def test_ls_json_streams_every_run_in_batches_newest_first_as_one_array(monkeypatch) -> None:
    """Read a batch at a time, by index from where the last batch ended (ties on the
    creation time broken by id), written as it comes: the same bytes as the whole list."""
    import json
    from datetime import UTC, datetime

    from corral.service import runs as service_runs
    from corral.service.runs import list_runs

    at = datetime(2030, 1, 1, tzinfo=UTC)
    store = Store.open(clock=lambda: at)  # every run created at the same instant
    ids = [_finished(store, f"s-{i}") for i in range(7)]
    monkeypatch.setattr(service_runs, "STREAM_BATCH", 3)
    reads: list[int | None] = []
    real = Store.list_runs

    def counted(self: Store, **kw: object) -> list:
        reads.append(kw.get("limit"))  # type: ignore[arg-type]
        return real(self, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "list_runs", counted)
    result = CliRunner().invoke(app, ["ls", "--json"])
    assert result.exit_code == 0, result.output
    streamed = json.loads(result.stdout)
    assert [r["id"] for r in streamed] == sorted(ids, reverse=True)
    assert reads == [3, 3, 3]  # never the whole table at once
    whole = [r.to_json() for r in list_runs()]
    assert result.stdout == json.dumps(whole, default=str) + "\n"
    limited = CliRunner().invoke(app, ["ls", "--json", "--limit", "2"])
    assert [r["id"] for r in json.loads(limited.stdout)] == sorted(ids, reverse=True)[:2]
    empty = CliRunner().invoke(app, ["ls", "--json", "--state", "RUNNING"])
    assert empty.stdout == "[]\n"
