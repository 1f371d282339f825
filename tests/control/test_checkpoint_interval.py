"""The default checkpoint interval from the interruption rate: the arithmetic, the observed
rate replacing the documented one, the plan's env from a provider without a notice, the spec's
override, and the SDK's timer reading it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.control.interval import (
    MIN_INTERVAL_S,
    checkpoint_interval,
    interruption_rate,
    observed_rate,
)
from corral.control.plan_builder import build_plan
from corral.providers.base import NodeProfile, Offer
from corral.sdk.interval import CheckpointTimer
from corral.spec import JobSpec
from corral.store import Store
from corral.wire.env import ENV_CKPT_INTERVAL, ENV_INTERRUPTIONS_PER_HOUR

OFFER = Offer(provider="salad", offer_id="x", price_per_hour=0.1)


def test_the_expected_loss_stays_under_the_bound_and_frequent_interruptions_shorten_it():
    # rare interruptions: the bound decides (lost work on average = interval / 2 <= 10 min)
    assert checkpoint_interval(0.01, max_lost_work_s=600) == 1200
    # frequent ones: the Young-Daly optimum sqrt(2 * save / rate) is shorter
    every = checkpoint_interval(2.0, max_lost_work_s=600, save_s=30)
    assert every == pytest.approx((2 * 30 * 3600 / 2.0) ** 0.5, abs=0.1) and every < 1200
    assert checkpoint_interval(1000.0, max_lost_work_s=600) == MIN_INTERVAL_S
    assert checkpoint_interval(None, max_lost_work_s=600) is None  # a notice, or no rate
    for rate in (0.0, 0.05, 0.3, 1.0, 4.0):
        assert checkpoint_interval(rate, max_lost_work_s=300) / 2 <= 300


def _attempt(store: Store, run_id: str, n: int, hours: float, reason: str) -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    store.create_attempt(run_id, n, provider="salad", offer={}, price_per_hour=0.1)
    store.update_attempt(
        run_id,
        n,
        running_at=start,
        ended_at=start + timedelta(hours=hours),
        exit_reason=reason,
    )


def test_the_observed_rate_replaces_the_documented_one_once_there_are_enough_hours(tmp_path):
    store = Store.open()
    run_id = store.create_run(
        name="r", spec={"name": "r", "run": "true"}, spec_hash="h", spec_path="/x", workdir="/x"
    ).id
    _attempt(store, run_id, 1, 2.0, "preempted")
    rate = interruption_rate(store, "salad", documented=0.3)
    assert rate is not None and (rate.source, rate.per_hour) == ("documented", 0.3)
    _attempt(store, run_id, 2, 6.0, "succeeded")
    rate = interruption_rate(store, "salad", documented=0.3)
    assert rate is not None and rate.source == "observed" and rate.per_hour == pytest.approx(1 / 8)
    assert interruption_rate(store, "salad", documented=None) is None  # a provider with a notice
    assert observed_rate([]) is None


def _spec(**checkpoints) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "t", "workdir": "/tmp", "run": "true", "checkpoints": checkpoints}
    )


def test_the_plan_carries_the_interval_for_a_provider_without_a_notice():
    plan = build_plan(
        _spec(max_lost_work="5m"),
        run_id="r-1",
        attempt=1,
        offer=OFFER,
        profile=NodeProfile(interruptions_per_hour=0.3),
    )
    policy = plan.checkpoint_policy
    assert policy.interval_s == 600 and policy.interruptions_per_hour == 0.3
    # what the agent gives the job's processes, for the SDK's CheckpointTimer
    assert policy.env()[ENV_CKPT_INTERVAL] == "600"
    assert policy.env()[ENV_INTERRUPTIONS_PER_HOUR] == "0.3"
    assert ENV_CKPT_INTERVAL not in plan.env  # the policy is not parsed back from strings
    observed = build_plan(
        _spec(),
        run_id="r-1",
        attempt=1,
        offer=OFFER,
        profile=NodeProfile(interruptions_per_hour=0.3),
        interruptions_per_hour=6.0,
    )
    assert observed.checkpoint_policy.interval_s < 600  # the observed rate wins
    none = build_plan(_spec(), run_id="r-1", attempt=1, offer=OFFER, profile=NodeProfile())
    assert none.checkpoint_policy.interval_s is None  # a notice comes, or nothing preempts
    assert ENV_CKPT_INTERVAL not in none.checkpoint_policy.env()
    fixed = build_plan(
        _spec(interval="15m"), run_id="r-1", attempt=1, offer=OFFER, profile=NodeProfile()
    )
    assert fixed.checkpoint_policy.interval_s == 900


def test_the_sdk_timer_reads_the_interval_from_the_environment():
    now = [0.0]
    timer = CheckpointTimer(clock=lambda: now[0], environ={ENV_CKPT_INTERVAL: "600"})
    assert not timer.due()
    now[0] = 599.0
    assert not timer.due() and timer.remaining() == 1.0
    now[0] = 600.0
    assert timer.due()
    timer.saved()
    assert not timer.due()
    assert CheckpointTimer(environ={}).due() is False  # no interval, no default
    assert CheckpointTimer(default=60, environ={ENV_CKPT_INTERVAL: "junk"}).interval_s == 60
