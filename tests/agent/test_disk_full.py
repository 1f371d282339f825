"""A job that fills the node's disk: the agent's own records still get written (a reserve is
released at the first ENOSPC), the stage logs keep draining, and the attempt ends saying the
disk was full instead of staying "finishing" forever (issue 28).

The end-to-end test runs the real agent process on a real full filesystem: a 3 MiB tmpfs in a
mount namespace of its own (root only; skipped where the machine does not allow it)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.agent.diskfull import RESERVE_FILE, DiskGuard
from corral.agent.events import EventLog, read_events_file
from support.waiting import wait_until

from .helpers import TOKEN, Client, make_plan


class _FillingFile:
    """A file object whose writes fail with ENOSPC while ``full`` is set."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.full = False
        self.closed = False

    def write(self, data: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(self.real.write(data))

    def flush(self) -> None:
        self.real.flush()

    def close(self) -> None:
        self.closed = True
        self.real.close()


def test_events_on_a_full_disk_are_kept_and_written_in_order_once_there_is_room(
    tmp_path: Path,
) -> None:
    reserve = tmp_path / RESERVE_FILE
    log = EventLog(tmp_path / "events.jsonl", disk=DiskGuard(reserve, size=64 * 1024))
    assert reserve.stat().st_size == 64 * 1024
    log.emit("attempt.started")

    def fill() -> None:  # the disk is (still) full for whatever file object the log holds
        filling = _FillingFile(log._file)
        filling.full = True
        log._file = filling  # type: ignore[assignment]

    fill()
    log.emit("stage.started", stage="train")  # never raises
    assert log.disk.reason is not None and "disk is full" in log.disk.reason
    assert not reserve.exists()  # released at the first ENOSPC, for the last records
    fill()
    log.emit("stage.finished", stage="train", data={"exit_code": 1})
    page, _ = log.after(0)
    assert [e["seq"] for e in page] == [1, 2, 3]  # the API serves them all meanwhile
    assert [e["seq"] for e in read_events_file(tmp_path / "events.jsonl")] == [1]
    # room again: the next event writes every one the file missed, in order, once
    log.emit("attempt.finished", data={"phase": "failed"})
    assert [e["seq"] for e in read_events_file(tmp_path / "events.jsonl")] == [1, 2, 3, 4]
    log.close()


def test_a_failed_stage_on_a_nearly_full_filesystem_is_said_to_be_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = DiskGuard()
    assert guard.check_after_failure(tmp_path) is None  # plenty of room here
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        "corral.agent.diskfull.shutil.disk_usage",
        lambda p: type(usage)(usage.total, usage.total - 1024, 1024),
    )
    reason = guard.check_after_failure(tmp_path)
    assert reason is not None and reason.startswith("the node's disk is full (0.0 MB free")


def _can_mount_tmpfs(where: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", str(where)],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.slow
def test_a_job_filling_the_disk_ends_its_attempt_with_the_reason(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _can_mount_tmpfs(disk):
        pytest.skip("needs root and mount namespaces (unshare -m) for a small tmpfs")
    # the stage fills the disk with a "checkpoint", then keeps printing (its log cannot be
    # written) and fails as a real script would on ENOSPC
    fill = (
        "import sys\n"
        "try:\n"
        "    open('ckpt.bin','wb').write(b'0' * 8_000_000)\n"
        "except OSError as e:\n"
        "    for i in range(200): print('step', i, 'x' * 200)\n"
        "    sys.exit(f'save failed: {e}')\n"
    )
    (tmp_path / "fill.py").write_text(fill)
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": f"{sys.executable} {tmp_path / 'fill.py'}"}],
        workdir=str(disk / "work"),
        state_dir=str(disk / "state"),
        checkpoint_dir=str(disk / "ckpt"),
    )
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    info = tmp_path / "agent-url"
    script = (
        f"mount -t tmpfs -o size=3m tmpfs {disk} && mkdir -p {disk}/work {disk}/state && "
        f"{sys.executable} -m corral.agent --plan {plan_path} & pid=$!; "
        f"while [ ! -s {disk}/state/agent.json ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done; "
        f"cp {disk}/state/agent.json {info}; wait $pid"
    )
    env = {**os.environ, "CORRAL_AGENT_TOKEN": TOKEN}
    proc = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the agent outlives unshare: stop the whole group at the end
    )
    try:
        wait_until(lambda: info.exists() and info.stat().st_size > 0, 20, message="agent.json")
        client = Client(json.loads(info.read_text())["url"])
        status = client.wait_finished(timeout=30)
        assert status["phase"] == "failed"
        events = client.get("/events?after=0")["events"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        last = events[-1]
        assert last["type"] == "attempt.finished" and last["data"]["phase"] == "failed"
        assert "the node's disk is full" in last["data"]["reason"]
        finished = [e for e in events if e["type"] == "stage.finished"]
        assert finished and finished[0]["data"]["exit_code"] == 1
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
