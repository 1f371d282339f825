"""Preemption must end in exit 75 ("resume me") whatever else is wrong at that moment."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from corral.sdk import Checkpointer, exit_if_preempted, install_signal_handlers
from corral.sdk import signals as sig
from corral.wire.env import EXIT_PREEMPTED


@pytest.mark.parametrize("raw", ["soon", "-5"])
def test_a_malformed_grace_period_still_saves_and_exits_75(
    tmp_path: Path, monkeypatch, capsys, raw
):
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", raw)
    cp = Checkpointer(tmp_path / "ck")
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as exited:
        exit_if_preempted(cp, lambda: {"step": 4}, step=4)
    assert exited.value.code == EXIT_PREEMPTED
    assert cp.latest().step == 4  # the default grace period (30 s) was used
    assert "CORRAL_GRACE_SECONDS" in capsys.readouterr().err


def test_seconds_left_falls_back_to_the_default_grace_period(monkeypatch, capsys):
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", "soon")
    assert sig.seconds_left() is None  # not preempted: nothing to say
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    left = sig.seconds_left(clock=lambda: sig._signal_at + 10.0)
    assert left == pytest.approx(sig.DEFAULT_GRACE_SECONDS - 10.0)
    assert "CORRAL_GRACE_SECONDS" in capsys.readouterr().err
