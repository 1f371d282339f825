"""The controller's notes of a run: one typed object per run, an attempt's part afresh for
the next attempt."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.control.notes import RunNotes


def test_an_attempts_notes_start_afresh_with_the_next_attempt_and_the_runs_stay() -> None:
    notes = RunNotes()
    first = notes.attempt(1)
    first.unreachable_since = datetime(2026, 1, 1, tzinfo=UTC)
    first.preemption_stop_asked = True
    notes.budget_warned = True
    assert notes.attempt(1) is first  # the same attempt: the same notes
    second = notes.attempt(2)
    assert second.number == 2 and second.unreachable_since is None
    assert not second.preemption_stop_asked
    assert notes.budget_warned  # the run's own notes outlive its attempts
