"""Retention: the pure rule against a simple reference model, and the Checkpointer applying it."""

from __future__ import annotations

import math
import os
import random
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import BadInput
from corral.sdk import Checkpointer, select_to_keep

METRIC = "loss"

# A metric value: mostly numbers from a small set (so ties happen), sometimes absent or invalid.
values = st.one_of(
    st.sampled_from([0.1, 0.2, 0.3, 0.5, 1.0, -2.0, 7]),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([None, "n/a", True, math.nan]),
    st.just("__absent__"),
)


@st.composite
def histories(draw):
    steps = draw(st.lists(st.integers(0, 10_000), unique=True, max_size=25))
    out = []
    for step in steps:
        value = draw(values)
        out.append((step, {} if value == "__absent__" else {METRIC: value, "other": 1}))
    return out


def reference(checkpoints, keep_last, keep_best, metric, mode):
    """The rule written the slow, obvious way."""
    steps = [s for s, _ in checkpoints]
    if not steps:
        return set()
    keep = {max(steps)}
    for s in steps:  # newest keep_last: fewer than keep_last steps are newer than s
        if sum(1 for t in steps if t > s) < keep_last:
            keep.add(s)

    def valid(m):
        v = m.get(metric)
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def better(a, b):  # is checkpoint a strictly better than b?
        va, vb = a[1][metric], b[1][metric]
        if va != vb:
            return va < vb if mode == "min" else va > vb
        return a[0] > b[0]  # tie: the newer step wins

    candidates = [c for c in checkpoints if valid(c[1])]
    for c in candidates:  # best keep_best: fewer than keep_best candidates beat c
        if sum(1 for d in candidates if better(d, c)) < keep_best:
            keep.add(c[0])
    return keep


policies = st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from(["min", "max"]))


@settings(max_examples=300, deadline=None)
@given(histories(), policies)
def test_select_to_keep_matches_the_reference_model(history, policy):
    keep_last, keep_best, mode = policy
    got = select_to_keep(history, keep_last, keep_best, METRIC, mode)
    assert got == reference(history, keep_last, keep_best, METRIC, mode)


@settings(max_examples=200, deadline=None)
@given(histories(), policies, st.randoms(use_true_random=False))
def test_select_to_keep_properties(history, policy, rnd):
    keep_last, keep_best, mode = policy
    got = select_to_keep(history, keep_last, keep_best, METRIC, mode)
    steps = {s for s, _ in history}
    assert got <= steps
    if steps:
        assert max(steps) in got  # never drops the newest
    assert len(got) <= max(keep_last, 1) + keep_best
    newest = sorted(steps, reverse=True)[:keep_last]
    assert set(newest) <= got
    for step in got - set(newest) - ({max(steps)} if steps else set()):
        metrics = dict(history)[step]  # kept only as a "best": must have a valid metric
        value = metrics.get(METRIC)
        assert isinstance(value, (int, float)) and not isinstance(value, bool)
        assert math.isfinite(value)
    shuffled = list(history)
    rnd.shuffle(shuffled)
    assert select_to_keep(shuffled, keep_last, keep_best, METRIC, mode) == got  # order-free


def test_ties_prefer_the_newer_step():
    history = [(1, {"loss": 0.5}), (2, {"loss": 0.5}), (3, {"loss": 0.5}), (4, {"loss": 9.0})]
    assert select_to_keep(history, 1, 1, "loss", "min") == {3, 4}
    assert select_to_keep(history, 1, 2, "loss", "min") == {2, 3, 4}


def test_min_and_max_modes_and_missing_or_nan_metrics():
    history = [(1, {"acc": 0.9}), (2, {"acc": float("nan")}), (3, {}), (4, {"acc": 0.1}), (5, {})]
    assert select_to_keep(history, 1, 1, "acc", "max") == {1, 5}
    assert select_to_keep(history, 1, 1, "acc", "min") == {4, 5}
    assert select_to_keep(history, 0, 0, "acc", "min") == {5}  # the newest survives anything
    assert select_to_keep([], 3, 3, "acc", "min") == set()


def test_invalid_policies_are_bad_input():
    with pytest.raises(BadInput):
        select_to_keep([(1, {})], -1, 0, None, "min")
    with pytest.raises(BadInput):
        select_to_keep([(1, {})], 1, 1, None, "min")
    with pytest.raises(BadInput):
        select_to_keep([(1, {})], 1, 0, None, "biggest")


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.4, None]), min_size=1, max_size=10),
    policies,
)
def test_checkpointer_keeps_exactly_what_the_rule_says_after_each_save(losses, policy):
    keep_last, keep_best, mode = policy
    with tempfile.TemporaryDirectory() as d:
        cp = Checkpointer(
            d, keep_last=keep_last, keep_best=keep_best, metric=METRIC, mode=mode, async_save=False
        )
        history = []
        for i, loss in enumerate(losses):
            step = (i + 1) * 10
            metrics = {} if loss is None else {METRIC: loss}
            cp.save({"i": i}, step, metrics)
            history.append((step, metrics))
            expected = reference(history, keep_last, keep_best, METRIC, mode)
            assert {c.step for c in cp.checkpoints()} == expected
            assert sorted(os.listdir(d)) == sorted(f"ckpt-{s}" for s in expected)
        if keep_best:
            scored = [(m[METRIC], s) for s, m in history if m]
            best = cp.best()
            if not scored:
                assert best is None
            elif mode == "min":
                assert best.step == min(scored, key=lambda vs: (vs[0], -vs[1]))[1]
            else:
                assert best.step == max(scored)[1]


def test_best_returns_the_best_by_metric_with_newer_winning_ties(tmp_path):
    cp = Checkpointer(tmp_path / "ck", keep_last=10, metric="acc", mode="max")
    rng = random.Random(3)
    accs = [0.5, 0.8, 0.8, 0.3]
    for i, acc in enumerate(accs):
        cp.save({"n": rng.random()}, i + 1, {"acc": acc})
    cp.wait()
    assert cp.best().step == 3
    assert cp.best().metrics == {"acc": 0.8}
