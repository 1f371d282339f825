"""The spec's retention reaches the script's Checkpointer through the agent's environment."""

from __future__ import annotations

import pytest

from corral.control.plan_builder import build_plan
from corral.errors import BadInput
from corral.providers.base import Offer
from corral.sdk import Checkpointer
from corral.spec import load_spec_text


def test_checkpointer_defaults_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_CHECKPOINT_KEEP_LAST", "2")
    monkeypatch.setenv("CORRAL_CHECKPOINT_KEEP_BEST", "1")
    monkeypatch.setenv("CORRAL_CHECKPOINT_METRIC", "val_loss")
    monkeypatch.setenv("CORRAL_CHECKPOINT_MODE", "max")
    ck = Checkpointer(tmp_path)
    assert (ck.keep_last, ck.keep_best, ck.metric, ck.mode) == (2, 1, "val_loss", "max")
    explicit = Checkpointer(tmp_path, keep_last=5, keep_best=0, mode="min")
    assert (explicit.keep_last, explicit.keep_best, explicit.mode) == (5, 0, "min")


def test_without_the_environment_the_defaults_are_3_0_min(tmp_path, monkeypatch):
    for name in ("KEEP_LAST", "KEEP_BEST", "METRIC", "MODE"):
        monkeypatch.delenv(f"CORRAL_CHECKPOINT_{name}", raising=False)
    ck = Checkpointer(tmp_path)
    assert (ck.keep_last, ck.keep_best, ck.metric, ck.mode) == (3, 0, None, "min")


def test_a_bad_environment_value_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_CHECKPOINT_KEEP_LAST", "many")
    with pytest.raises(BadInput, match="CORRAL_CHECKPOINT_KEEP_LAST"):
        Checkpointer(tmp_path)


def test_the_plan_carries_the_specs_retention(tmp_path):
    spec = load_spec_text(
        "name: r\nrun: python t.py\n"
        "checkpoints: {keep_last: 4, keep_best: 2, metric: cer, mode: min}\n",
        base_dir=tmp_path,
    )
    plan = build_plan(spec, run_id="r-1", attempt=1, offer=Offer(provider="local", offer_id="x"))
    env = plan.checkpoint_policy.env()  # what the agent gives the script's processes
    assert env["CORRAL_CHECKPOINT_KEEP_LAST"] == "4"
    assert env["CORRAL_CHECKPOINT_KEEP_BEST"] == "2"
    assert env["CORRAL_CHECKPOINT_METRIC"] == "cer"
    assert env["CORRAL_CHECKPOINT_MODE"] == "min"


def test_retention_policy_takes_arguments_then_environment_then_fallback(monkeypatch):
    from corral.sdk import retention_policy

    for name in ("KEEP_LAST", "KEEP_BEST", "METRIC", "MODE"):
        monkeypatch.delenv(f"CORRAL_CHECKPOINT_{name}", raising=False)
    fallback = {"keep_last": 2, "keep_best": 1, "metric": "val_loss"}
    assert retention_policy(fallback=fallback) == {
        "keep_last": 2,
        "keep_best": 1,
        "metric": "val_loss",
        "mode": "min",
    }
    monkeypatch.setenv("CORRAL_CHECKPOINT_KEEP_LAST", "5")
    monkeypatch.setenv("CORRAL_CHECKPOINT_METRIC", "cer")
    assert retention_policy(fallback=fallback) == {
        "keep_last": 5,
        "keep_best": 1,
        "metric": "cer",
        "mode": "min",
    }
    assert retention_policy(keep_last=0, fallback=fallback)["keep_last"] == 0
    with pytest.raises(BadInput, match="unknown keys: keep"):
        retention_policy(fallback={"keep": 1})
    with pytest.raises(BadInput, match="mode must be"):
        retention_policy(mode="biggest")
