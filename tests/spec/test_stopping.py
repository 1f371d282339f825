"""The stop fields (stop_signal, stop_grace, save_signal, save_command): parsing, errors, and
how they reach the agent's plan."""

from __future__ import annotations

from corral.control.plan_builder import build_plan, longest_grace
from corral.providers.base import NodeProfile, Offer
from corral.wire.plan import AgentPlan

from .helpers import load, one

OFFER = Offer(provider="local", offer_id="x", price_per_hour=0.0)


def test_signal_names_are_accepted_in_any_common_spelling():
    spec = load("name: x\nrun: python train.py\nstop_signal: int\nsave_signal: SIGusr1\n")
    main = spec.stage_list()[0]
    assert (main.stop_signal, main.save_signal) == ("SIGINT", "SIGUSR1")


def test_sigkill_is_refused_as_a_stop_signal_naming_the_field():
    err = one("name: x\nstages:\n  - {name: a, run: x, stop_signal: SIGKILL}\n")
    assert err["field"] == "stages[0].stop_signal"
    assert "SIGKILL cannot be caught" in err["message"]


def test_an_unknown_signal_names_the_choices():
    err = one("name: x\nrun: x\nsave_signal: SIGFOO\n")
    assert err["field"] == "save_signal"
    assert "SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2" in err["message"]


def test_top_level_stop_fields_belong_to_the_run_form_only():
    err = one("name: x\nstop_grace: 2m\nstages:\n  - {name: a, run: x}\n")
    assert "set `stop_grace` on each stage" in err["message"]


def test_the_plan_carries_the_stop_fields_and_caps_the_stage_grace_at_the_nodes():
    spec = load(
        "name: x\nstages:\n"
        "  - {name: a, run: x, stop_signal: INT, stop_grace: 5m, save_command: 'kill -USR1 1'}\n"
        "  - {name: b, run: y, save_signal: USR1, stop_grace: 10s}\n"
        "  - {name: c, run: z}\n"
    )
    plan = build_plan(
        spec, run_id="r", attempt=1, offer=OFFER, profile=NodeProfile(max_grace_seconds=90)
    )
    a, b, c = plan.stages
    assert (a.stop_signal, a.stop_grace_seconds, a.save_command) == ("SIGINT", 90, "kill -USR1 1")
    assert (b.save_signal, b.stop_grace_seconds, b.grace(30)) == ("SIGUSR1", 10, 10)
    assert (c.stop_signal, c.stop_grace_seconds, c.grace(30)) == ("SIGTERM", None, 30)
    assert longest_grace(spec) == 300
    # the defaults stay out of the wire form: such a plan reads as it did before
    dumped = plan.model_dump(mode="json")["stages"][2]
    assert not {"stop_signal", "stop_grace_seconds", "save_signal", "save_command"} & set(dumped)
    assert AgentPlan.model_validate_json(plan.model_dump_json()) == plan


def test_the_run_form_gives_its_stop_fields_to_the_main_stage():
    spec = load("name: x\nrun: python train.py\nstop_grace: 45s\nsave_command: touch save\n")
    stage = build_plan(spec, run_id="r", attempt=1, offer=OFFER).stages[0]
    assert (stage.stop_grace_seconds, stage.save_command) == (45, "touch save")


def test_the_plan_knows_its_longest_stop():
    spec = load("name: x\nstages:\n  - {name: a, run: x, stop_grace: 2m}\n  - {name: b, run: y}\n")
    assert build_plan(spec, run_id="r", attempt=1, offer=OFFER).longest_grace() == 120
    quick = load("name: x\nrun: x\nstop_grace: 5s\n")
    assert build_plan(quick, run_id="r", attempt=1, offer=OFFER).longest_grace() == 30
