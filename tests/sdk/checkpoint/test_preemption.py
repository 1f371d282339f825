"""Preemption: signals only set a flag; exit_if_preempted saves what fits and exits 75."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from corral.errors import BadInput
from corral.sdk import (
    Checkpointer,
    exit_if_preempted,
    install_signal_handlers,
    preempted,
    request_stop,
    should_stop,
)
from corral.sdk import signals as sig
from corral.wire.env import EXIT_PREEMPTED

SCRIPT = Path(__file__).parent / "scripts" / "sigterm_train.py"


def test_sigterm_and_sigusr1_only_set_the_preempted_flag():
    assert install_signal_handlers() is True
    assert install_signal_handlers() is True  # idempotent
    assert signal.getsignal(signal.SIGTERM) is sig._on_signal
    assert not preempted() and not should_stop()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert preempted() and should_stop()
    assert sig.stop_reason() == "preempted"
    sig._reset_for_tests()
    os.kill(os.getpid(), signal.SIGTERM)  # still alive: the handler replaced the default
    assert preempted()


def test_uninstall_puts_back_the_previous_handlers():
    previous = signal.getsignal(signal.SIGUSR1)
    install_signal_handlers()
    sig.uninstall_signal_handlers()
    assert signal.getsignal(signal.SIGUSR1) == previous


def test_install_outside_the_main_thread_is_refused_with_a_warning():
    result = []

    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result.append((install_signal_handlers(), [str(w.message) for w in caught]))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    installed, messages = result[0]
    assert installed is False
    assert any("main thread" in m for m in messages)


def test_request_stop_makes_the_loop_stop_without_meaning_preempted():
    request_stop("budget")
    request_stop("early_stopping")  # the first reason is kept
    assert should_stop() and not preempted()
    assert sig.stop_reason() == "budget"
    exit_if_preempted()  # not preempted: returns


def test_grace_period_comes_from_the_checkpointer_then_env_then_default(tmp_path, monkeypatch):
    assert sig.grace_seconds() == 30.0
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", "12.5")
    assert sig.grace_seconds() == 12.5
    assert sig.grace_seconds(Checkpointer(tmp_path / "ck", grace_seconds=3)) == 3.0
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", "soon")
    with pytest.raises(BadInput, match="CORRAL_GRACE_SECONDS"):
        sig.grace_seconds()


def test_a_save_fits_only_with_margin_to_spare():
    assert sig.save_fits(10.0, None)  # unknown duration: try
    assert not sig.save_fits(0.0, None)
    assert sig.save_fits(10.0, 2.0)
    assert not sig.save_fits(3.0, 2.0)  # 2 s x 1.5 + 1 s margin > 3 s


class FakeClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_exit_if_preempted_saves_the_current_step_then_exits_75(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck", grace_seconds=30)
    cp.save({"step": 10}, 10)
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as exited:
        exit_if_preempted(cp, lambda: {"step": 13}, step=13)
    assert exited.value.code == EXIT_PREEMPTED == 75
    assert cp.latest().step == 13
    assert cp.restore() == {"step": 13}


def test_exit_if_preempted_with_no_grace_left_flushes_but_starts_no_save(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck", grace_seconds=5)
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    cp.save({"step": 20, "w": np.ones(100_000)}, 20)  # in flight when we decide
    called = []
    clock = FakeClock(sig._signal_at + 6.0)  # 6 s after the signal: the 5 s grace is gone
    with pytest.raises(SystemExit) as exited:
        exit_if_preempted(cp, lambda: called.append(1) or {"step": 21}, step=21, clock=clock)
    assert exited.value.code == 75
    assert called == []  # the state was not even built
    assert cp.latest().step == 20  # the save in flight was made durable
    assert sorted(os.listdir(tmp_path / "ck")) == ["ckpt-20"]


def test_exit_if_preempted_skips_a_save_estimated_not_to_fit(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck", grace_seconds=10)
    cp.save({"step": 1}, 1)
    cp.wait()
    cp._save_seconds = 8.0  # the last save took 8 s: 8 x 1.5 + 1 > 10 - 1
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    clock = FakeClock(sig._signal_at + 1.0)
    with pytest.raises(SystemExit):
        exit_if_preempted(cp, lambda: {"step": 2}, step=2, clock=clock)
    assert cp.latest().step == 1


def run_training(tmp_path: Path, grace: str) -> tuple[subprocess.CompletedProcess, Path]:
    ck = tmp_path / "ck"
    env = {**os.environ, "CORRAL_GRACE_SECONDS": grace}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(ck)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), ck


def exit_step(out: str) -> int:
    m = re.search(r"exit at (\d+)", out)
    assert m, out
    return int(m.group(1))


def test_sigterm_mid_training_saves_the_current_step_and_exits_75(tmp_path: Path):
    done, ck = run_training(tmp_path, grace="30")
    assert done.returncode == EXIT_PREEMPTED, done.stderr
    step = exit_step(done.stdout)
    assert step >= 25  # "ready" is printed at step 25
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = Checkpointer(ck).restore()
    assert state["step"] == step
    assert np.all(state["model"]["w"] == step)


def test_sigterm_with_too_short_grace_exits_75_without_a_torn_checkpoint(tmp_path: Path):
    done, ck = run_training(tmp_path, grace="0")
    assert done.returncode == EXIT_PREEMPTED, done.stderr
    step = exit_step(done.stdout)
    if step % 20:  # (at a multiple of 20 the step was already saved: nothing to decide)
        assert "not enough for a checkpoint" in done.stderr
    entries = sorted(os.listdir(ck))
    assert all(re.fullmatch(r"ckpt-\d+", e) for e in entries), entries  # no .tmp left over
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every checkpoint present is whole
        infos = Checkpointer(ck).checkpoints()
        state = Checkpointer(ck).restore()
    assert len(infos) == len(entries)
    assert state["step"] % 20 == 0 and state["step"] <= step  # the last periodic save
    assert np.all(state["model"]["w"] == state["step"])
