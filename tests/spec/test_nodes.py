"""``resources.nodes`` and a stage's ``nodes``: the machines of a multi-node job, each bad
value refused in one line naming its field."""

from __future__ import annotations

from .helpers import load, one


def test_nodes_default_to_one_and_run_form_runs_on_every_node():
    spec = load("name: x\nrun: python train.py\n")
    assert spec.resources.nodes == 1
    spec = load("name: x\nresources: {nodes: 4, gpus: 'H100:8'}\nrun: torchrun train.py\n")
    assert spec.resources.nodes == 4
    assert [s.nodes for s in spec.stage_list()] == ["all"]


def test_stages_stay_on_the_head_node_unless_they_ask():
    text = (
        "name: x\nresources: {nodes: 3}\nstages:\n"
        "  - {name: prep, run: x, nodes: all}\n"
        "  - {name: train, run: x, nodes: all, needs: prep}\n"
        "  - {name: eval, run: x, needs: train}\n"
        "  - {name: half, run: x, nodes: 2}\n"
    )
    assert [s.nodes for s in load(text).stages or []] == ["all", "all", 1, 2]


def test_a_stage_needing_one_on_fewer_nodes_is_refused_naming_the_need():
    """On the nodes where the needed stage does not run, nothing would hold this one back."""
    err = one(
        "name: x\nresources: {nodes: 3}\nstages:\n"
        "  - {name: prep, run: x}\n"
        "  - {name: train, run: x, nodes: all, needs: prep}\n"
    )
    assert err["field"] == "stages[1].needs[0]"
    assert err["message"] == (
        "stage 'train' runs on 3 nodes but needs 'prep', which runs on 1: run 'prep' on at "
        "least 3 nodes (each node needs its output), or this stage on fewer"
    )


def test_nodes_below_one_or_above_the_bound_are_refused_naming_the_field():
    err = one("name: x\nresources: {nodes: 0}\nrun: x\n")
    assert (err["field"], err["message"]) == ("resources.nodes", "must be >= 1, got 0")
    err = one("name: x\nresources: {nodes: 1000}\nrun: x\n")
    assert (err["field"], err["message"]) == ("resources.nodes", "must be at most 256, got 1000")
    err = one("name: x\nresources: {nodes: 1.5}\nrun: x\n")
    assert err["field"] == "resources.nodes"
    err = one("name: x\nresources: {nodes: 2}\nstages:\n  - {name: a, run: x, nodes: 0}\n")
    assert err["field"] == "stages[0].nodes"
    assert err["message"].startswith("a stage runs on at least 1 node, got 0")
    err = one("name: x\nresources: {nodes: 2}\nstages:\n  - {name: a, run: x, nodes: some}\n")
    assert err["message"] == (
        "invalid stage nodes 'some' (expected a count of machines such as 2, or 'all')"
    )


def test_a_multi_node_stage_in_a_one_node_job_is_refused():
    err = one("name: x\nstages:\n  - {name: train, run: x, nodes: 2}\n")
    assert err["field"] == "stages[0].nodes"
    assert err["message"] == (
        "stage 'train' asks for 2 nodes but the job has one "
        "(set resources.nodes to run a stage on several machines)"
    )
    err = one("name: x\nresources: {nodes: 2}\nstages:\n  - {name: train, run: x, nodes: 3}\n")
    assert err["message"] == "stage 'train' asks for 3 nodes but resources.nodes gives 2"
    # 'all' of a one-node job is that one node
    assert load("name: x\nstages:\n  - {name: a, run: x, nodes: all}\n").stages


def test_gpu_pins_of_a_multi_node_stage_must_fit_the_smallest_node():
    head = "name: x\nresources: {nodes: 2, gpus: 'A100:4..8'}\nstages:\n"
    err = one(head + "  - {name: train, run: x, nodes: all, gpus: [0, 5]}\n")
    assert err["field"] == "stages[0].gpus[1]"
    assert err["message"] == (
        "stage 'train' runs on 2 nodes and pins GPU index 5 on each but a node may have only "
        "4 (resources.gpus asks for 4..8)"
    )
    err = one(head + "  - {name: train, run: x, nodes: 2, gpus: 6}\n")
    assert err["field"] == "stages[0].gpus"
    # within the fewest: fine; on the head node alone, the machine's most still counts
    assert load(head + "  - {name: train, run: x, nodes: all, gpus: [0, 3]}\n")
    assert load(head + "  - {name: eval, run: x, gpus: [7]}\n")
    assert load(head + "  - {name: train, run: x, nodes: all, gpus: all}\n")


def test_nodes_can_be_set_from_the_command_line():
    spec = load("name: x\nrun: x\n", overrides=["resources.nodes=2"])
    assert spec.resources.nodes == 2


def test_a_stages_nodes_can_be_set_from_the_command_line():
    text = "name: x\nresources: {nodes: 2}\nstages:\n  - {name: train, run: x}\n"
    assert load(text, overrides=["stages.train.nodes=all"]).stages[0].nodes == "all"
    assert load(text, overrides=["stages.0.nodes=2"]).stages[0].nodes == 2
    err = one(text, overrides=["stages.train.nodes=3"])
    assert err["message"] == "stage 'train' asks for 3 nodes but resources.nodes gives 2"
