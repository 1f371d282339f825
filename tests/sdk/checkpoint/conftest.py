"""Checkpoint test helpers: preemption state reset around every test."""

from __future__ import annotations

import pytest

from corral.sdk import signals


@pytest.fixture(autouse=True)
def clean_signals():
    signals._reset_for_tests()
    yield
    signals.uninstall_signal_handlers()
    signals._reset_for_tests()
