"""Multi-GPU launchers in a stage's command: ``torchrun`` (or ``python -m torch.distributed.run``),
``accelerate launch`` and ``deepspeed``.

A stage that uses one gets, unless the job's env already says otherwise:

- ``MASTER_ADDR=127.0.0.1`` and ``MASTER_PORT`` set to a free port of this node, so two stages
  (or two runs) on one machine never meet on the default 29500;
- for torchrun, the same as its ``PET_MASTER_ADDR``/``PET_MASTER_PORT`` defaults, and
  ``PET_NPROC_PER_NODE`` = the stage's GPU count (when it has GPUs and the command does not
  say ``--nproc-per-node``): one rank per GPU the stage was given;
- for ``accelerate launch`` and ``deepspeed``, which read no port from the environment, the
  port as ``--main_process_port`` / ``--master_port`` after the launcher's name (when the
  command does not give one). Both take their GPUs from ``CUDA_VISIBLE_DEVICES``.

Command-line flags the job gives always win (torchrun reads ``PET_*`` only as defaults).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping

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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def uses_launcher(command: str) -> bool:
    return any(p.search(command) for p in (_TORCHRUN, _ACCELERATE, _DEEPSPEED))


def prepare(
    command: str,
    gpus: int,
    given: Mapping[str, str],
    port: Callable[[], int] = free_port,
) -> tuple[str, dict[str, str]]:
    """The command to run and the variables to add for a stage with ``gpus`` GPUs; ``given``
    is the job's own env (its values win). A command without a launcher is returned as is."""
    if not uses_launcher(command):
        return command, {}
    master = given.get("MASTER_PORT") or str(port())
    env = {"MASTER_ADDR": given.get("MASTER_ADDR") or "127.0.0.1", "MASTER_PORT": master}
    if _TORCHRUN.search(command):
        env["PET_MASTER_ADDR"] = env["MASTER_ADDR"]
        env["PET_MASTER_PORT"] = master
        if gpus > 0 and not _NPROC.search(command):
            env["PET_NPROC_PER_NODE"] = str(gpus)
    if not _ACCELERATE_PORT.search(command):
        command = _ACCELERATE.sub(rf"\1 --main_process_port {master}", command, count=1)
    if not _DEEPSPEED_PORT.search(command):
        command = _DEEPSPEED.sub(rf"\1 --master_port {master}", command, count=1)
    return command, {k: v for k, v in env.items() if k not in given}
