"""Shared fixtures. Every test gets its own CORRAL_HOME so nothing touches ~/.corral."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import controller_logs
from support.postgres import scratch_database

#: no test reaches past loopback (support/socket_guard fails any test that does)
pytest_plugins = ("support.socket_guard",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A ``slow`` test (several processes, real clocks, a loaded 2-core CI machine) that fails
    is run once more before the run fails: one timing flake must not cost a whole CI run. The
    rerun stays visible (the summary counts it, "1 rerun", and ``-rR`` names it), so a flake
    is seen and fixed, not hidden. A test that fails twice fails the run."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=1))


#: the first failure of each test that was run again (printed at the end: the flake to fix)
_RERUN_FAILURES: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun":
        captured = "".join(f"\n-- {title}\n{text[-3000:]}" for title, text in report.sections)
        _RERUN_FAILURES.append((report.nodeid, report.longreprtext + captured))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _RERUN_FAILURES:
        return
    terminalreporter.section("first failures of the tests run again")
    for nodeid, text in _RERUN_FAILURES:
        terminalreporter.write_line(f"--- {nodeid}")
        for line in text.splitlines()[-120:]:
            terminalreporter.write_line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failed test that ran a controller gets the end of that controller's log as a report
    section (each one: the background controller's ``controller.log`` and every log of a
    ``start_controller()`` helper, ``support.controller_logs``): a flake under load (a run
    that never moved) is read from the controller's own account, not guessed at after the
    temporary home is gone."""
    report = yield
    home = getattr(item, "funcargs", {}).get("corral_home")
    if report.failed:
        report.sections.extend(controller_logs.sections(home if isinstance(home, Path) else None))
    if call.when == "teardown":
        controller_logs.clear()
    return report


@pytest.fixture(autouse=True)
def corral_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("corral-home")
    monkeypatch.setenv("CORRAL_HOME", str(home))
    monkeypatch.delenv("CORRAL_DATABASE_URL", raising=False)
    monkeypatch.delenv("CORRAL_FAKE_GPUS", raising=False)
    monkeypatch.delenv("CORRAL_PROVIDERS", raising=False)
    # background controllers started by a test exit on their own soon after it
    monkeypatch.setenv("CORRAL_CONTROLLER_IDLE_EXIT", "20")
    # W&B's own background calls (its default host is api.forge.coreweave.com) go to loopback,
    # where they are refused at once, instead of a DNS lookup the socket guard would pin on
    # whichever test runs at that moment; a test that needs another host sets its own
    if "WANDB_BASE_URL" not in os.environ:
        monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    # the machine-wide GPU locks of this test alone: parallel tests share fake GPU ids
    monkeypatch.setenv("CORRAL_GPU_LOCK_DIR", str(tmp_path_factory.mktemp("gpu-locks")))
    # a belled quiet run is pulled every 2 s here, as without a bell (default 30 s): most
    # tests read copied logs and progress without following the run; the bell's quiet pace
    # itself is tested in tests/control/test_bell.py (which sets its own)
    monkeypatch.setenv("CORRAL_QUIET_POLL_INTERVAL", "2")
    yield home
    _cleanup_home(home)


def _cleanup_home(home: Path) -> None:
    """Kill what a test left running under its CORRAL_HOME: the controller, local agents,
    fake-cloud machines and the local stand-ins of test AWS instances. Best effort: a teardown must reach every one of them."""
    import signal
    from contextlib import suppress

    from corral.control.lock import running_pid

    pid = running_pid(home)  # only a pid whose process still holds the controller lock
    if pid and pid > 0:
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    providers = []
    if (home / "local" / "instances").exists():
        from corral.providers.local.provider import LocalProvider

        providers.append(LocalProvider(home=home, gpus=[]))
    if (home / "fake").exists():
        from corral.providers.fake import FakeProvider

        providers.append(FakeProvider({}, home=home, clock=lambda: 0.0, timers=False))
    if (home / "aws-machines").exists():
        from corral.testing.aws import LocalMachineRunner

        with suppress(Exception):
            LocalMachineRunner(home).stop_all()
    for provider in providers:
        with suppress(Exception):
            for inst in provider.list_instances():
                with suppress(Exception):
                    provider.terminate(inst)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head with no rows, made once per session (its WAL folded in):
    tests copy it, never open it in place."""
    import sqlite3

    from corral.store import Store

    path = tmp_path_factory.mktemp("migrated-sqlite") / "template.db"
    Store.open(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the local PostgreSQL server."""
    with scratch_database("corral_t_") as url:
        yield url
