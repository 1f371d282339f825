"""Retention: the pure rule against a simple reference model, and the Checkpointer applying it."""

from __future__ import annotations

import json
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


def reference(checkpoints, keep_last, keep_best, metric, mode, protected=()):
    """The rule written the slow, obvious way."""
    steps = [s for s, _ in checkpoints]
    if not steps:
        return set()
    keep = {max(steps)} | {s for s in protected if s in steps}
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


@st.composite
def protected_steps(draw, history):
    """Some of the history's steps (the one just written, say) and maybe an absent one."""
    steps = sorted(s for s, _ in history)
    chosen = draw(st.lists(st.sampled_from(steps), max_size=2)) if steps else []
    return chosen + draw(st.lists(st.integers(10_001, 10_005), max_size=1))


@settings(max_examples=300, deadline=None)
@given(st.data(), histories(), policies)
def test_select_to_keep_matches_the_reference_model(data, history, policy):
    keep_last, keep_best, mode = policy
    protected = data.draw(protected_steps(history))
    got = select_to_keep(history, keep_last, keep_best, METRIC, mode, protected=protected)
    assert got == reference(history, keep_last, keep_best, METRIC, mode, protected)


@settings(max_examples=200, deadline=None)
@given(st.data(), histories(), policies, st.randoms(use_true_random=False))
def test_select_to_keep_properties(data, history, policy, rnd):
    keep_last, keep_best, mode = policy
    protected = data.draw(protected_steps(history))
    got = select_to_keep(history, keep_last, keep_best, METRIC, mode, protected=protected)
    steps = {s for s, _ in history}
    assert got <= steps
    if steps:
        assert max(steps) in got  # never drops the newest
    assert steps & set(protected) <= got  # never drops a protected step
    assert len(got) <= max(keep_last, 1) + keep_best + len(set(protected))
    newest = sorted(steps, reverse=True)[:keep_last]
    assert set(newest) <= got
    for step in got - set(newest) - ({max(steps)} if steps else set()) - set(protected):
        metrics = dict(history)[step]  # kept only as a "best": must have a valid metric
        value = metrics.get(METRIC)
        assert isinstance(value, (int, float)) and not isinstance(value, bool)
        assert math.isfinite(value)
    shuffled = list(history)
    rnd.shuffle(shuffled)
    assert select_to_keep(shuffled, keep_last, keep_best, METRIC, mode, protected=protected) == got


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
    st.lists(
        st.tuples(st.integers(1, 12), st.sampled_from([0.1, 0.2, 0.3, 0.4, None])),
        min_size=1,
        max_size=10,
    ),
    policies,
)
def test_checkpointer_keeps_exactly_what_the_rule_says_after_each_save(saves, policy):
    """Steps in any order (a run that resumed from an older checkpoint saves a lower step than
    ones on disk; a step saved twice replaces it): the model is the rule applied, after each
    save, to what is on disk with the step just written protected."""
    keep_last, keep_best, mode = policy
    with tempfile.TemporaryDirectory() as d:
        cp = Checkpointer(
            d, keep_last=keep_last, keep_best=keep_best, metric=METRIC, mode=mode, async_save=False
        )
        on_disk: dict[int, dict] = {}
        for i, (step, loss) in enumerate(saves):
            metrics = {} if loss is None else {METRIC: loss}
            cp.save({"i": i}, step * 10, metrics)
            on_disk[step * 10] = metrics
            expected = reference(
                list(on_disk.items()), keep_last, keep_best, METRIC, mode, (step * 10,)
            )
            on_disk = {s: m for s, m in on_disk.items() if s in expected}
            assert step * 10 in expected  # the checkpoint just written always survives
            assert {c.step for c in cp.checkpoints()} == expected
            assert sorted(os.listdir(d)) == sorted(f"ckpt-{s}" for s in expected)
        history = list(on_disk.items())
        if keep_best:
            scored = [(m[METRIC], s) for s, m in history if m]
            best = cp.best()
            if not scored:
                assert best is None
            elif mode == "min":
                assert best.step == min(scored, key=lambda vs: (vs[0], -vs[1]))[1]
            else:
                assert best.step == max(scored)[1]


def test_a_lower_step_saved_after_a_resume_is_kept_and_its_progress_record_is_valid(
    tmp_path, monkeypatch
):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    cp = Checkpointer(tmp_path / "ck", keep_last=1, async_save=False)
    for step in (2, 4, 10):
        cp.save({"step": step}, step)
    # the run goes back to an older checkpoint (say, the best one) and continues from there
    cp.save({"step": 6}, 6)
    assert [c.step for c in cp.checkpoints()] == [6, 10]
    assert cp.restore(tmp_path / "ck" / "ckpt-6") == {"step": 6}
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    last = [r for r in records if r["kind"] == "checkpoint"][-1]
    assert last["step"] == 6 and os.path.isdir(last["path"])
    cp.save({"step": 7}, 7)  # the next save: 6 is neither newest nor just written any more
    assert [c.step for c in cp.checkpoints()] == [7, 10]


def test_best_returns_the_best_by_metric_with_newer_winning_ties(tmp_path):
    cp = Checkpointer(tmp_path / "ck", keep_last=10, metric="acc", mode="max")
    rng = random.Random(3)
    accs = [0.5, 0.8, 0.8, 0.3]
    for i, acc in enumerate(accs):
        cp.save({"n": rng.random()}, i + 1, {"acc": acc})
    cp.wait()
    assert cp.best().step == 3
    assert cp.best().metrics == {"acc": 0.8}
