from __future__ import annotations

import math
from pathlib import Path

import pytest

from corral.sdk import Checkpointer, EarlyStopping, restore_training_state, training_state
from corral.sdk import signals as sig


def test_stops_after_patience_evaluations_without_improvement():
    es = EarlyStopping(patience=3)
    results = [es.step(v) for v in [1.0, 0.9, 0.95, 0.96, 0.97]]
    assert results == [False, False, False, False, True]
    assert es.best == 0.9
    assert es.num_bad == 3


def test_an_improvement_resets_the_count():
    es = EarlyStopping(patience=2)
    assert [es.step(v) for v in [1.0, 1.1, 0.5, 0.6, 0.7]] == [False, False, False, False, True]


def test_improvement_smaller_than_min_delta_does_not_count():
    es = EarlyStopping(patience=1, min_delta=0.01)
    assert es.step(1.0) is False
    assert es.step(0.995) is True  # better, but by less than min_delta
    assert es.best == 1.0


def test_max_mode_wants_higher_values():
    es = EarlyStopping(patience=2, mode="max")
    assert [es.step(v) for v in [0.5, 0.6, 0.55, 0.6]] == [False, False, False, True]
    assert es.best == 0.6


def test_nan_counts_as_no_improvement_and_never_becomes_best():
    es = EarlyStopping(patience=2)
    assert es.step(math.nan) is False
    assert es.best is None
    assert es.step(1.0) is False
    assert es.step(math.nan) is False
    assert es.step(math.inf) is True
    assert es.best == 1.0


def test_patience_zero_stops_at_the_first_bad_evaluation():
    es = EarlyStopping(patience=0)
    assert es.step(1.0) is False
    assert es.step(2.0) is True


def test_state_dict_round_trip_keeps_counting_after_resume():
    first = EarlyStopping(patience=3)
    for v in [1.0, 0.8, 0.9, 0.85]:
        first.step(v)
    second = EarlyStopping(patience=3)
    second.load_state_dict(first.state_dict())
    assert (second.best, second.num_bad) == (0.8, 2)
    assert second.step(0.81) is True


def test_loading_state_of_another_mode_is_refused():
    state = EarlyStopping(patience=1, mode="max").state_dict()
    with pytest.raises(ValueError, match="mode='max'"):
        EarlyStopping(patience=1).load_state_dict(state)


@pytest.mark.parametrize(
    "kwargs", [{"patience": -1}, {"patience": 1.5}, {"patience": 1, "mode": "best"}]
)
def test_bad_arguments_are_value_errors(kwargs):
    with pytest.raises(ValueError):
        EarlyStopping(**kwargs)


def test_trigger_can_request_a_stop_through_the_signals_module(monkeypatch):
    from corral.sdk import signals

    calls = []
    monkeypatch.setattr(signals, "request_stop", lambda *a, **k: calls.append(1))
    es = EarlyStopping(patience=1, request_stop_on_trigger=True)
    es.step(1.0)
    assert calls == []
    assert es.step(2.0) is True
    es.step(3.0)
    assert calls == [1]  # only the first trigger asks


def test_trigger_does_not_request_a_stop_unless_asked(monkeypatch):
    from corral.sdk import signals

    calls = []
    monkeypatch.setattr(signals, "request_stop", lambda *a, **k: calls.append(1))
    es = EarlyStopping(patience=0)
    es.step(1.0)
    assert es.step(2.0) is True
    assert calls == []


# Early stopping with ``request_stop_on_trigger`` across a resume: the stop request lives in the
# process, the trigger in the checkpoint.


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
