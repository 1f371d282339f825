"""Multi-GPU launchers in a stage's command get the stage's GPUs and a free rendezvous port."""

from __future__ import annotations

import socket

from corral.agent.launchers import free_port, prepare, uses_launcher


def _port() -> int:
    return 41234


def test_torchrun_gets_a_free_port_and_one_rank_per_gpu_of_the_stage():
    command, env = prepare("torchrun train.py --steps 10", 4, {}, port=_port)
    assert command == "torchrun train.py --steps 10"  # torchrun reads PET_* defaults
    assert env == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "41234",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "41234",
        "PET_NPROC_PER_NODE": "4",
    }


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
    assert env == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "41234"}
    given = "accelerate launch --main-process-port 1 train.py"
    assert prepare(given, 2, {}, port=_port)[0] == given


def test_deepspeed_gets_the_port_on_its_command_line_in_command_position_only():
    command, _ = prepare("pip install deepspeed; NCCL_DEBUG=INFO deepspeed t.py", 2, {}, _port)
    assert command == "pip install deepspeed; NCCL_DEBUG=INFO deepspeed --master_port 41234 t.py"
    assert prepare("deepspeed --master_port 7 t.py", 2, {}, _port)[0].count("master_port") == 1


def test_commands_without_a_launcher_are_left_alone():
    for command in ("python train.py --deepspeed ds.json", "echo torchrun", "ls deepspeed/"):
        assert not uses_launcher(command), command
        assert prepare(command, 2, {}, port=_port) == (command, {})


def test_free_port_is_free():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
