"""Early stopping with ``request_stop_on_trigger`` across a resume: the stop request lives in the
process, the trigger in the checkpoint."""

from __future__ import annotations

from pathlib import Path

from corral.sdk import Checkpointer, restore_training_state, training_state
from corral.sdk import signals as sig
from corral.sdk.early_stop import EarlyStopping


def save_and_restart(tmp_path: Path, stopper: EarlyStopping) -> dict:
    """Checkpoint the stopper through a real save, then forget the process's stop request (the
    next attempt is a new process)."""
    cp = Checkpointer(tmp_path / "ck")
    cp.save(training_state({}, step=7, loop={"early_stop": stopper.state_dict()}), 7)
    cp.wait()
    sig._reset_for_tests()
    info = restore_training_state(Checkpointer(tmp_path / "ck").restore(), {})
    return info["loop"]["early_stop"]


def test_a_run_preempted_right_after_the_trigger_stops_again_after_the_resume(tmp_path):
    first = EarlyStopping(patience=2, request_stop_on_trigger=True)
    for value in (1.0, 2.0, 3.0):
        first.step(value)
    assert sig.should_stop()
    # ... a SIGTERM in the same step: exit_if_preempted saved this state and exited 75.
    saved = save_and_restart(tmp_path, first)

    second = EarlyStopping(patience=2, request_stop_on_trigger=True)
    second.load_state_dict(saved)
    assert sig.should_stop()  # the resumed loop ends at its first check, not never
    assert sig.stop_reason() == "early stopping"


def test_raising_the_patience_on_resume_still_requests_the_stop_when_it_runs_out(tmp_path):
    first = EarlyStopping(patience=1, request_stop_on_trigger=True)
    first.step(1.0)
    first.step(2.0)  # triggered with patience 1
    saved = save_and_restart(tmp_path, first)

    second = EarlyStopping(patience=3, request_stop_on_trigger=True)  # the config changed
    second.load_state_dict(saved)
    assert not sig.should_stop()  # one bad evaluation of three: keep training
    assert second.step(2.5) is False
    assert second.step(2.6) is True
    assert sig.should_stop() and sig.stop_reason() == "early stopping"


def test_loading_a_triggered_state_without_request_stop_on_trigger_asks_nothing(tmp_path):
    first = EarlyStopping(patience=1)
    first.step(1.0)
    first.step(2.0)
    saved = save_and_restart(tmp_path, first)
    second = EarlyStopping(patience=1)
    second.load_state_dict(saved)
    assert second.triggered and not sig.should_stop()
