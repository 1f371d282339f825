"""Where a launcher's stage sends its save signal: the ranks' own groups (torchrun), else the
ranks in the launcher's group by pid (one-process ``accelerate launch``, ``deepspeed``), never
the launcher or the shell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corral.agent import ranks
from support.waiting import wait_until

PY = sys.executable


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "-c", "accelerate launch train.py"],
        ["/bin/sh", "-c", "x"],
        ["/usr/bin/torchrun", "train.py"],
        [PY, "/usr/local/bin/accelerate", "launch", "--cpu", "train.py"],
        ["python3.11", "-u", "/opt/bin/deepspeed", "train.py"],
        ["python", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "train.py"],
        ["python", "-m", "torch.distributed.run", "train.py"],
    ],
)
def test_launchers_and_shells_are_not_ranks(argv: list[str]) -> None:
    assert ranks.is_launcher(argv)


@pytest.mark.parametrize(
    "argv",
    [
        [PY, "train.py"],
        ["python", "-u", "train.py", "--local_rank=0"],
        ["python", "-m", "my.trainer"],
        ["./train"],
        [],
    ],
)
def test_a_script_is_a_rank(argv: list[str]) -> None:
    assert not ranks.is_launcher(argv)


#: a launcher named like deepspeed's that keeps its two ranks in its own group, as
#: ``deepspeed`` on one node and ``accelerate launch`` with one process do
LAUNCHER = f"""#!{PY}
import subprocess, sys
procs = [subprocess.Popen([sys.executable, "rank.py", str(r)]) for r in (0, 1)]
for p in procs:
    p.wait()
"""
RANK = """
import pathlib, signal, sys, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
pathlib.Path(f"up-{sys.argv[1]}").touch()
time.sleep(60)
"""


def _group_of(tmp_path: Path, command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["bash", "-c", command], cwd=tmp_path, start_new_session=True)


def test_ranks_in_the_launchers_group_are_signalled_by_pid(tmp_path: Path) -> None:
    launcher = tmp_path / "deepspeed"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o755)
    (tmp_path / "rank.py").write_text(RANK)
    leader = _group_of(tmp_path, "./deepspeed train.py; echo done")  # bash stays: a shell
    try:
        wait_until(lambda: all((tmp_path / f"up-{r}").exists() for r in (0, 1)), 30)
        groups, pids = ranks.save_targets(leader.pid)
        assert groups == []
        assert len(pids) == 2
        for pid in pids:
            assert os.getpgid(pid) == leader.pid
            assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1] == b"rank.py"
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_ranks_in_sessions_of_their_own_are_signalled_by_group(tmp_path: Path) -> None:
    (tmp_path / "deepspeed").write_text(
        LAUNCHER.replace("str(r)])", "str(r)], start_new_session=True)")
    )
    (tmp_path / "deepspeed").chmod(0o755)
    (tmp_path / "rank.py").write_text(RANK)
    leader = _group_of(tmp_path, "exec ./deepspeed train.py")
    groups: list[int] = []
    try:
        wait_until(lambda: all((tmp_path / f"up-{r}").exists() for r in (0, 1)), 30)
        groups, pids = ranks.save_targets(leader.pid)
        assert pids == []
        assert len(groups) == 2 and leader.pid not in groups
    finally:
        for group in [*groups, leader.pid]:
            os.killpg(group, signal.SIGKILL)
        leader.wait()
