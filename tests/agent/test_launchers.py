"""Every stage gets its rendezvous (nodes, rank, the head's address, a free port); multi-GPU
launchers in a stage's command get the stage's GPUs and the port on their command line."""

from __future__ import annotations

import socket

from corral.agent.launchers import Rendezvous, free_port, prepare, uses_launcher


def _port() -> int:
    return 41234


#: what every stage of a one-node job gets with the port 41234
ONE_NODE = {
    "CORRAL_NUM_NODES": "1",
    "CORRAL_NODE_RANK": "0",
    "CORRAL_MASTER_ADDR": "127.0.0.1",
    "CORRAL_MASTER_PORT": "41234",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "41234",
    "NNODES": "1",
    "NODE_RANK": "0",
    "PET_NNODES": "1",
    "PET_NODE_RANK": "0",
    "PET_MASTER_ADDR": "127.0.0.1",
    "PET_MASTER_PORT": "41234",
}


def test_torchrun_gets_a_free_port_and_one_rank_per_gpu_of_the_stage():
    command, env = prepare("torchrun train.py --steps 10", 4, {}, port=_port)
    assert command == "torchrun train.py --steps 10"  # torchrun reads PET_* defaults
    assert env == {**ONE_NODE, "PET_NPROC_PER_NODE": "4"}


def test_the_jobs_own_nproc_and_port_win():
    command = "cd src && torchrun --nproc_per_node=2 train.py"
    _, env = prepare(command, 4, {"MASTER_PORT": "29999"}, port=_port)
    assert "PET_NPROC_PER_NODE" not in env and "MASTER_PORT" not in env
    assert env["PET_MASTER_PORT"] == "29999"


def test_a_stage_without_gpus_leaves_torchruns_rank_count_alone():
    _, env = prepare("python -m torch.distributed.run --standalone t.py", 0, {}, port=_port)
    assert "PET_NPROC_PER_NODE" not in env and env["PET_MASTER_PORT"] == "41234"


def test_accelerate_launch_gets_the_port_on_its_command_line():
    command, env = prepare("accelerate launch --multi_gpu train.py", 2, {}, port=_port)
    assert command == "accelerate launch --main_process_port 41234 --multi_gpu train.py"
    assert env == ONE_NODE
    given = "accelerate launch --main-process-port 1 train.py"
    assert prepare(given, 2, {}, port=_port)[0] == given


def test_deepspeed_gets_the_port_on_its_command_line_in_command_position_only():
    command, _ = prepare("pip install deepspeed; NCCL_DEBUG=INFO deepspeed t.py", 2, {}, port=_port)
    assert command == "pip install deepspeed; NCCL_DEBUG=INFO deepspeed --master_port 41234 t.py"
    assert prepare("deepspeed --master_port 7 t.py", 2, {}, port=_port)[0].count("master_port") == 1


def test_commands_without_a_launcher_keep_their_text_and_get_the_rendezvous():
    for command in ("python train.py --deepspeed ds.json", "echo torchrun", "ls deepspeed/"):
        assert not uses_launcher(command), command
        assert prepare(command, 2, {}, port=_port) == (command, ONE_NODE)


def test_the_jobs_own_names_win_but_corrals_follow_them():
    given = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29999", "NODE_RANK": "3"}
    _, env = prepare("python t.py", 0, given, port=lambda: 1 / 0)  # no port asked for
    assert "MASTER_ADDR" not in env and "MASTER_PORT" not in env and "NODE_RANK" not in env
    assert env["CORRAL_MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "10.0.0.5"
    assert env["CORRAL_MASTER_PORT"] == env["PET_MASTER_PORT"] == "29999"
    assert env["CORRAL_NODE_RANK"] == "0"  # corral's contract is corral's


def test_a_node_of_a_gang_gets_its_rank_and_the_heads_address():
    meet = Rendezvous(nodes=4, rank=2, master_addr="10.0.0.1")
    _, env = prepare("torchrun train.py", 8, {}, port=_port, meet=meet)
    assert env["CORRAL_NUM_NODES"] == env["NNODES"] == env["PET_NNODES"] == "4"
    assert env["CORRAL_NODE_RANK"] == env["NODE_RANK"] == env["PET_NODE_RANK"] == "2"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "10.0.0.1"
    assert env["PET_NPROC_PER_NODE"] == "8"


def test_accelerate_and_deepspeed_on_several_nodes_get_the_node_flags_they_read():
    meet = Rendezvous(nodes=2, rank=1, master_addr="10.0.0.1")
    command, _ = prepare("accelerate launch train.py", 4, {}, port=_port, meet=meet)
    assert command == (
        "accelerate launch --num_machines 2 --machine_rank 1 --main_process_ip 10.0.0.1 "
        "--main_process_port 41234 train.py"
    )
    command, _ = prepare("deepspeed t.py --deepspeed ds.json", 4, {}, port=_port, meet=meet)
    assert command == (
        "deepspeed --num_nodes 2 --node_rank 1 --master_addr 10.0.0.1 --no_ssh "
        "--master_port 41234 t.py --deepspeed ds.json"
    )
    given = "accelerate launch --num_machines 2 --machine_rank 1 --main_process_port 5 t.py"
    assert prepare(given, 4, {}, port=_port, meet=meet)[0] == given  # the job's own win
    one = prepare("deepspeed t.py", 4, {}, port=_port)[0]
    assert one == "deepspeed --master_port 41234 t.py"  # one node: no node flags


def test_free_port_is_free():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
