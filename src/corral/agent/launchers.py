"""Where a stage's ranks meet, and the multi-GPU launchers in its command: ``torchrun`` (or
``python -m torch.distributed.run``), ``accelerate launch`` and ``deepspeed``.

Every stage gets the rendezvous of its nodes (:class:`Rendezvous`: how many machines run the
stage, this node's rank among them, the head node's address) and a free port of this node:

- ``CORRAL_NUM_NODES``, ``CORRAL_NODE_RANK``, ``CORRAL_MASTER_ADDR``, ``CORRAL_MASTER_PORT``
  (corral's contract: always set, the job's own ``MASTER_ADDR``/``MASTER_PORT`` included);
- the names the launchers and ``torch.distributed``'s ``env://`` read, unless the job's env
  already sets them: ``MASTER_ADDR``, ``MASTER_PORT``, ``NNODES`` and ``NODE_RANK``, and
  torchrun's defaults ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``,
  ``PET_MASTER_PORT`` (torchrun reads ``PET_<FLAG>`` for each flag not given; see
  ``torch/distributed/argparse_util.py``), so ``torchrun train.py`` needs no rendezvous
  flag. The port is this node's free one, so two stages (or two runs) on one machine never
  meet on the default 29500;
- for torchrun, ``PET_NPROC_PER_NODE`` = the stage's GPU count (when it has GPUs and the
  command does not say ``--nproc-per-node``): one rank per GPU the stage was given;
- for ``accelerate launch`` and ``deepspeed``, which read no port from the environment, the
  port as ``--main_process_port`` / ``--master_port`` after the launcher's name (when the
  command does not give one), and on a stage of several nodes, which they read no node count
  from either, ``--num_machines N --machine_rank K --main_process_ip ADDR`` /
  ``--num_nodes N --node_rank K --master_addr ADDR --no_ssh`` (one launcher per node, which is
  what corral's agents are; unless the command gives ``--num_machines`` / ``--num_nodes``).
  Both take their GPUs from ``CUDA_VISIBLE_DEVICES``.

Command-line flags the job gives always win (torchrun reads ``PET_*`` only as defaults).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from corral.errors import BadInput
from corral.wire import env as C
from corral.wire.gang import ENV_GANG_RANK, GANG_VARS, GangRole
from corral.wire.plan import AgentPlan

# a launcher in command position: at the start, after ; & | ( or `exec`, after VAR=value words
_LEAD = r"(?:^|[;&|(]|\bexec)\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\S*/)?"
_TORCHRUN = re.compile(
    _LEAD + r"(?:torchrun|python[0-9.]*\s+-m\s+torch\.distributed\.(?:run|launch))(?=\s|$)",
    re.M,
)
_ACCELERATE = re.compile(r"(" + _LEAD + r"accelerate\s+launch)(?=\s|$)", re.M)
_DEEPSPEED = re.compile(r"(" + _LEAD + r"deepspeed)(?=\s|$)", re.M)
_NPROC = re.compile(r"--nproc[-_]per[-_]node\b")
_ACCELERATE_PORT = re.compile(r"--main[-_]process[-_]port\b")
_DEEPSPEED_PORT = re.compile(r"--master[-_]port\b")
_ACCELERATE_NODES = re.compile(r"--num[-_]machines\b")
_DEEPSPEED_NODES = re.compile(r"--num[-_]nodes\b")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def uses_launcher(command: str) -> bool:
    return any(p.search(command) for p in (_TORCHRUN, _ACCELERATE, _DEEPSPEED))


def for_this_node(plan: AgentPlan, role: GangRole | None, path: str) -> AgentPlan:
    """``plan`` (read from ``path``) if this node can run it: a plan for a gang needs the
    node's role (its rank and the head's address, given by the launch: ``wire.gang``), and a
    plan for one node takes none. Never run a gang's plan as if it were the whole job."""
    if plan.nodes > 1 and role is None:
        raise BadInput(
            f"plan file {path} is for a gang of {plan.nodes} nodes and this node was given no "
            f"place in it ({', '.join(GANG_VARS)})"
        )
    if role is not None and role.rank >= plan.nodes:
        raise BadInput(
            f"{ENV_GANG_RANK}={role.rank}: the plan's gang has {plan.nodes} node(s) "
            f"(ranks 0..{plan.nodes - 1})"
        )
    return plan


@dataclass(frozen=True)
class Rendezvous:
    """Where a stage's ranks meet: the machines that run the stage, this node's rank among
    them (0: the head) and the head's address. One node: 1, 0, this node's loopback."""

    nodes: int = 1
    rank: int = 0
    master_addr: str = "127.0.0.1"


def rendezvous_env(meet: Rendezvous, given: Mapping[str, str], port: str) -> dict[str, str]:
    """The rendezvous variables of a stage (see the module's doc); ``given``: the job's env,
    whose values win for every name but corral's own."""
    addr = given.get("MASTER_ADDR") or meet.master_addr
    port = given.get("MASTER_PORT") or port
    nodes, rank = str(meet.nodes), str(meet.rank)
    standard = {
        "MASTER_ADDR": addr,
        "MASTER_PORT": port,
        "NNODES": nodes,
        "NODE_RANK": rank,
        "PET_NNODES": nodes,
        "PET_NODE_RANK": rank,
        "PET_MASTER_ADDR": addr,
        "PET_MASTER_PORT": port,
    }
    return {
        **{k: v for k, v in standard.items() if k not in given},
        C.ENV_NUM_NODES: nodes,
        C.ENV_NODE_RANK: rank,
        C.ENV_MASTER_ADDR: addr,
        C.ENV_MASTER_PORT: port,
    }


def prepare(
    command: str,
    gpus: int,
    given: Mapping[str, str],
    meet: Rendezvous = Rendezvous(),
    port: Callable[[], int] = free_port,
) -> tuple[str, dict[str, str]]:
    """The command to run and the variables to add for a stage with ``gpus`` GPUs meeting
    its other ranks at ``meet``; ``given`` is the job's own env (its values win)."""
    env = rendezvous_env(meet, given, given.get("MASTER_PORT") or str(port()))
    master = env[C.ENV_MASTER_PORT]
    ranks = _TORCHRUN.search(command) and gpus > 0 and not _NPROC.search(command)
    if ranks and "PET_NPROC_PER_NODE" not in given:
        env["PET_NPROC_PER_NODE"] = str(gpus)
    if not _ACCELERATE_PORT.search(command):
        command = _ACCELERATE.sub(rf"\1 --main_process_port {master}", command, count=1)
    if not _DEEPSPEED_PORT.search(command):
        command = _DEEPSPEED.sub(rf"\1 --master_port {master}", command, count=1)
    if meet.nodes > 1:  # neither reads the node count from the environment: their flags
        nodes, rank, addr = meet.nodes, meet.rank, env[C.ENV_MASTER_ADDR]
        if not _ACCELERATE_NODES.search(command):
            flags = f"--num_machines {nodes} --machine_rank {rank} --main_process_ip {addr}"
            command = _ACCELERATE.sub(rf"\1 {flags}", command, count=1)
        if not _DEEPSPEED_NODES.search(command):
            flags = f"--num_nodes {nodes} --node_rank {rank} --master_addr {addr} --no_ssh"
            command = _DEEPSPEED.sub(rf"\1 {flags}", command, count=1)
    return command, env
