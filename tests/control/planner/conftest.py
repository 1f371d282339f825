"""Fixtures of the planner tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import use_fake_cloud


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake cloud of ``helpers.CLOUD`` and a local machine with one L40S."""
    return use_fake_cloud(tmp_path, monkeypatch)
