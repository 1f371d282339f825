"""The nodes of a multi-node job in the agent's plan: the gang's size and each stage's machines,
left out of a one-node plan (it reads as before), and an agent that refuses to run one node of
a gang as if it were the whole job."""

from __future__ import annotations

import os

import pytest

from corral.agent.main import main
from corral.control.plan_builder import build_plan
from corral.providers.base import Offer
from corral.spec import load_spec_text
from corral.wire.plan import AgentPlan

OFFER = Offer(provider="local", offer_id="x")


def _plan(text: str) -> AgentPlan:
    return build_plan(load_spec_text(text, source="c.yaml"), run_id="r", attempt=1, offer=OFFER)


def test_the_plan_carries_the_gang_and_each_stages_machines():
    plan = _plan(
        "name: x\nresources: {nodes: 3}\nstages:\n"
        "  - {name: prep, run: a}\n  - {name: train, run: b, nodes: all}\n"
        "  - {name: two, run: c, nodes: 2}\n"
    )
    assert plan.nodes == 3
    assert [s.nodes for s in plan.stages] == [1, 3, 2]
    assert AgentPlan.model_validate_json(plan.model_dump_json()) == plan


def test_a_one_node_plan_reads_as_before():
    plan = _plan("name: x\nrun: python t.py\n")
    dumped = plan.model_dump(mode="json")
    assert "nodes" not in dumped and "nodes" not in dumped["stages"][0]
    assert plan.nodes == plan.stages[0].nodes == 1


def test_a_stage_on_more_nodes_than_the_gang_is_not_a_plan():
    plan = _plan("name: x\nresources: {nodes: 2}\nrun: torchrun t.py\n").model_dump(mode="json")
    plan["nodes"] = 1
    with pytest.raises(ValueError, match="stage 'main' runs on 2 nodes of a gang of 1"):
        AgentPlan.model_validate(plan)


def test_the_agent_refuses_a_gang_plan_without_its_place_in_the_gang_in_one_line(
    tmp_path, capsys, monkeypatch
):
    """A gang's plan needs the node's rank and the head's address (the launch gives them in
    the agent's environment): without them, or with a rank past the gang, one line each."""
    plan = _plan("name: x\nresources: {nodes: 2}\nrun: torchrun t.py\n")
    path = tmp_path / "plan.json"
    plan.dump(path)
    monkeypatch.setenv("CORRAL_AGENT_TOKEN", "t")
    for env, said in (
        ({}, "is for a gang of 2 nodes and this node was given no place in it "
             "(CORRAL_GANG_RANK, CORRAL_GANG_MASTER_ADDR, CORRAL_GANG_MASTER_PORT)"),
        ({"CORRAL_GANG_RANK": "2", "CORRAL_GANG_MASTER_ADDR": "10.0.0.1",
          "CORRAL_GANG_MASTER_PORT": "29500"},
         "CORRAL_GANG_RANK=2: the plan's gang has 2 node(s) (ranks 0..1)"),
        ({"CORRAL_GANG_RANK": "1"}, "CORRAL_GANG_MASTER_ADDR is not set: a node of a gang "
         "needs CORRAL_GANG_RANK, CORRAL_GANG_MASTER_ADDR, CORRAL_GANG_MASTER_PORT"),
        ({"CORRAL_GANG_RANK": "1", "CORRAL_GANG_MASTER_ADDR": "h", "CORRAL_GANG_MASTER_PORT": "80"},
         "CORRAL_GANG_MASTER_PORT=80: expected 1024..65279"),
    ):  # fmt: skip
        monkeypatch.setenv("CORRAL_AGENT_TOKEN", "t")
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        code = main(["--plan", str(path), "--root", str(tmp_path / "node")])
        err = capsys.readouterr().err.strip()
        assert code != 0
        assert err.endswith(said), err
        assert "\n" not in err and "Traceback" not in err
        assert not any(k.startswith("CORRAL_GANG_") for k in os.environ)  # taken out
