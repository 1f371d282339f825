"""SDK test isolation: a scratch working directory, no corral/tracker/rank environment leaking
in, the SDK's default tracker set, the last loaded config and the preemption flags reset after
each test."""

from __future__ import annotations

from pathlib import Path

import pytest

_ENV = (
    "CORRAL_PROGRESS_FILE",
    "CORRAL_TRACKERS",
    "CORRAL_CHECKPOINT_DIR",
    "CORRAL_RUN_ID",
    "CORRAL_ATTEMPT",
    "CORRAL_GRACE_SECONDS",
    "CORRAL_HOURLY_PRICE",
    "CORRAL_COST_OFFSET_USD",
    "CORRAL_BUDGET_USD",
    "WANDB_API_KEY",
    "WANDB_MODE",
    "MLFLOW_TRACKING_URI",
    "CORRAL_CHECKPOINT_KEEP_LAST",
    "CORRAL_CHECKPOINT_KEEP_BEST",
    "CORRAL_CHECKPOINT_METRIC",
    "CORRAL_CHECKPOINT_MODE",
    "RANK",
    "LOCAL_RANK",
)


@pytest.fixture(autouse=True)
def sdk_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    yield work
    import sys

    config = sys.modules.get("corral.sdk.config")
    if config is not None:
        config._last_loaded = None  # no config "loaded" by an earlier test
    trackers = sys.modules.get("corral.sdk.trackers")
    if trackers is not None:
        trackers.init()  # back to "JSONL only, nothing configured"
        trackers.finish()
    signals = sys.modules.get("corral.sdk.signals")
    if signals is not None:
        signals.uninstall_signal_handlers()
        signals._reset_for_tests()


@pytest.fixture
def cli():
    """``cli(*args)``: run ``corral preflight *args`` (the command alone, in a small app)."""
    import typer
    from typer.testing import CliRunner

    from corral.cli.preflight import preflight

    app = typer.Typer()
    app.command("preflight")(preflight)

    @app.callback()
    def _root() -> None:
        pass

    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["preflight", *map(str, args)])
