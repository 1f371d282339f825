"""The ``progress`` field: a preset or a regex with named groups, on a stage or with ``run:``;
it travels to the agent in the stage's plan."""

from __future__ import annotations

from corral.control.plan_builder import build_plan
from corral.providers.base import NodeProfile, Offer

from .helpers import load, one

OFFER = Offer(provider="salad", offer_id="x", price_per_hour=0.1)


def test_a_preset_or_a_regex_on_a_stage():
    spec = load(
        "name: x\nstages:\n  - {name: a, run: x, progress: nanogpt}\n"
        "  - {name: b, run: y, progress: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}\n"
    )
    assert [s.progress for s in spec.stage_list()] == [
        "nanogpt",
        r"Step (?P<step>\d+)/(?P<total>\d+)",
    ]


def test_top_level_progress_goes_with_run_to_its_stage():
    spec = load("name: x\nrun: python train.py\nprogress: hf\n")
    assert spec.stage_list()[0].progress == "hf"
    assert load("name: x\nrun: python train.py\n").stage_list()[0].progress is None


def test_top_level_progress_with_stages_is_an_error():
    err = one("name: x\nprogress: hf\nstages:\n  - {name: a, run: x}\n")
    assert err["field"] == "progress"
    assert err["message"] == "with `stages`, set `progress` on the stages"


def test_a_broken_regex_is_a_one_line_error_naming_the_field():
    err = one("name: x\nstages:\n  - {name: a, run: x, progress: 'loss (?P<loss>[0-9'}\n")
    assert err["field"] == "stages[0].progress"
    assert (
        "not a preset (hf, nanogpt, lightning, ultralytics, torchtitan, nanochat)" in err["message"]
    )
    assert "\n" not in err["message"]


def test_a_regex_without_named_groups_or_a_misspelt_preset_is_an_error():
    err = one("name: x\nrun: x\nprogress: nanogtp\n")
    assert err["field"] == "progress" and "named groups" in err["message"]


def test_the_plan_carries_the_stage_pattern_and_leaves_it_out_when_unset():
    spec = load("name: x\nworkdir: /tmp\nrun: python train.py\nprogress: lightning\n")
    plan = build_plan(spec, run_id="r-1", attempt=1, offer=OFFER, profile=NodeProfile())
    assert plan.stages[0].progress == "lightning"
    bare = load("name: x\nworkdir: /tmp\nrun: python train.py\n")
    plan = build_plan(bare, run_id="r-1", attempt=1, offer=OFFER, profile=NodeProfile())
    assert "progress" not in plan.model_dump(mode="json")["stages"][0]
