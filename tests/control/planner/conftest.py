"""Fixtures of the planner tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cli import CLOUD


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``CORRAL_PROVIDERS=local,fake``: the fake cloud of ``cli.CLOUD``, and a local machine with one
    L40S (so an A100 request is infeasible here whatever GPUs the test machine has)."""
    path = tmp_path / "cloud.yaml"
    path.write_text(CLOUD)
    monkeypatch.setenv("CORRAL_FAKE_CLOUD", str(path))
    monkeypatch.setenv("CORRAL_PROVIDERS", "local,fake")
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:1")
    return path
