"""What a spending cap has spent, and which of its runs stop so the bill stays under it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.control.spend import assess, period_label, period_start, span_cost
from corral.store.caps import Span
from corral.store.records import CapRecord

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _cap(amount: float, period: str = "month") -> CapRecord:
    return CapRecord("team", "", period, amount, 0.9, NOW, NOW, None)


def _span(
    run: str,
    price: float,
    started_ago_s: float,
    *,
    state: str = "RUNNING",
    ended_ago_s: float | None = None,
) -> Span:
    started = NOW - timedelta(seconds=started_ago_s)
    ended = None if ended_ago_s is None else NOW - timedelta(seconds=ended_ago_s)
    return Span(run, 1, "fake", price, started, ended, state, 1, started)


def test_a_monthly_cap_counts_only_this_months_share_of_an_attempt() -> None:
    assert period_start("month", NOW) == datetime(2026, 11, 1, tzinfo=UTC)
    assert period_start("total", NOW) is None
    assert (period_label("month", NOW), period_label("total", NOW)) == ("2026-11", "total")
    # $3.60/h from 10:00 on Oct 31 to 02:00 on Nov 1: 2 h in November, 14 h in all
    span = Span(
        "r", 1, "fake", 3.6, datetime(2026, 10, 31, 12, tzinfo=UTC),
        datetime(2026, 11, 1, 2, tzinfo=UTC), "SUCCEEDED", 1, None,
    )  # fmt: skip
    assert round(span_cost(span, period_start("month", NOW), NOW), 6) == 7.2
    assert round(span_cost(span, None, NOW), 6) == 50.4
    # a live one bills until now
    assert round(span_cost(_span("x", 3.6, 3600), None, NOW), 6) == 3.6


def test_nothing_stops_while_spend_and_the_stops_cost_fit_under_the_cap() -> None:
    spans = [_span("a", 36.0, 100)]  # $1 spent, $0.01 a second
    state = assess(_cap(10.0), spans, NOW, stop_s=lambda _p: 10.0, next_look_s=2.0)
    assert round(state.spent_usd, 6) == 1.0 and state.to_stop == frozenset()
    # the cap is reached in (10 - 1 - 0.01 * (12.5 + 2)) / 0.01 s
    assert state.reach_in_s is not None and abs(state.reach_in_s - 885.5) < 1e-6
    assert state.runs == {"a"}


def test_at_the_cap_the_most_recently_started_runs_stop_first_and_the_oldest_last() -> None:
    spans = [
        _span("oldest", 36.0, 500),  # $5 spent
        _span("newer", 36.0, 300),  # $3
        _span("newest", 36.0, 100),  # $1
        _span("waiting", 36.0, 50, state="PROVISIONING"),  # $0.50, no job running yet
        _span("over", 36.0, 900, state="SUCCEEDED", ended_ago_s=800),  # $1, ended
    ]
    # $10.50 spent: every run still billing must go
    state = assess(_cap(10.0), spans, NOW, stop_s=lambda _p: 5.0, next_look_s=2.0)
    assert state.to_stop == {"oldest", "newer", "newest", "waiting"}
    # $10.50 spent of $20: each billing run would add 0.01 x (6.25 + 2) = $0.0825 if kept;
    # shedding one saves $0.02: nothing to stop yet
    assert assess(_cap(20.0), spans, NOW, stop_s=lambda _p: 5.0, next_look_s=2.0).to_stop == set()
    # $10.80: over once the running four's $0.33 is counted; the provisioning run goes first,
    # then the newest running one, until the rest fits
    state = assess(_cap(10.80), spans, NOW, stop_s=lambda _p: 5.0, next_look_s=2.0)
    assert state.to_stop == {"waiting", "newest"}
    state = assess(_cap(10.75), spans, NOW, stop_s=lambda _p: 5.0, next_look_s=2.0)
    assert state.to_stop == {"waiting", "newest", "newer", "oldest"}


def test_a_run_of_an_earlier_attempt_or_a_free_machine_is_not_billing() -> None:
    earlier = Span("r", 1, "fake", 36.0, NOW - timedelta(seconds=60), None, "RUNNING", 2, None)
    state = assess(_cap(1.0), [earlier], NOW, stop_s=lambda _p: 1.0, next_look_s=1.0)
    assert state.runs == frozenset() and state.to_stop == frozenset()
    assert state.reach_in_s is None
