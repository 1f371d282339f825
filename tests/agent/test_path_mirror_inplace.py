"""The mirror of ``checkpoints.path`` against scripts that write their checkpoints in place:
saved more often than ``checkpoints.settle``, right before the stop, while the job is killed,
as a directory written file by file (transformers 5.x's ``checkpoint-N``), or never left
alone long enough to copy. The writers are child processes of the test (the "agent"), as a
job's are of the agent: the mirror sees their open files in ``/proc``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.agent import mirror_advice
from support.waiting import wait_until

from .test_path_mirror import Events, FakeRunner, _mirror, _plan, _snapshots

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs procfs")

# torch.save(state, path) straight into the file: opened, written in pieces, closed. Each
# version is n repeated, then END<n>: a copy that mixes two versions shows.
SAVER = """\
import os, sys, time
path, every, count, hold = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
for n in range(1, count + 1):
    with open(path, "wb") as f:
        body = (b"%06d" % n) * 20000
        for i in range(0, len(body), 16384):
            f.write(body[i : i + 16384])
            f.flush()
            time.sleep(0.002)
        if hold == "open" and n == count:  # the stop comes while it writes the last one
            print("writing", flush=True)
            time.sleep(60)
        f.write(b"END%06d" % n)
    print("saved", n, flush=True)
    if n < count:
        time.sleep(every)
if hold == "wait":
    time.sleep(60)
"""

# transformers 5.x: checkpoint-<step>/ made in place, its files written one after another
# (the weights, the optimizer, then trainer_state.json), with a pause between them.
HF_DIR = """\
import json, os, sys, time
out, every, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
for step in range(1, count + 1):
    d = os.path.join(out, f"checkpoint-{step}")
    os.makedirs(d)
    for name in ("model.safetensors", "optimizer.pt"):
        with open(os.path.join(d, name), "wb") as f:
            f.write(os.urandom(50000))
        time.sleep(0.3)  # the next part is gathered: no file open
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step}, f)
    print("saved", step, flush=True)
    time.sleep(every)
"""


def _start(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE, text=True
    )


def _read_until(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, f"the writer ended before printing {text!r}"
        if line.startswith(text):
            return


def _copied(tmp_path: Path, rel: str) -> list[bytes]:
    """The file ``rel`` of each complete snapshot still in storage."""
    root = tmp_path / "store" / "run-1" / "mirror"
    return [
        (d / "files" / rel).read_bytes()
        for d in sorted(root.iterdir())
        if (d / "COMPLETE").is_file() and (d / "files" / rel).is_file()
    ]


def _whole(data: bytes) -> int:
    """The version a copy holds; it fails on a copy mixing two versions or cut short."""
    n = int(data[-6:])
    assert data == (b"%06d" % n) * 20000 + b"END%06d" % n
    return n


def test_a_checkpoint_saved_in_place_every_half_second_is_mirrored(tmp_path) -> None:
    """Saved in place more often than ``checkpoints.settle`` (10 s): today's scripts with a
    short save interval. Most saves go up, each copy one whole version, the last one too."""
    plan = _plan(tmp_path, "a", ["out/ckpt.pt"], checkpoint_settle_s=10.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    proc = _start(SAVER, Path(plan.workdir) / "out" / "ckpt.pt", 0.5, 8, "exit")
    assert proc.wait(60) == 0
    live = len(events.of("checkpoint.uploaded"))
    runner.exit_code = 0
    hook.after_stages(runner, "succeeded")
    hook.close()
    assert live >= 4, events.items  # while the job ran, not only at its end
    copies = [_whole(data) for data in _copied(tmp_path, "out/ckpt.pt")]
    assert copies[-1] == 8 and copies == sorted(copies)
    assert not events.of("checkpoint.warning")


def test_a_checkpoint_closed_right_before_the_stop_is_mirrored(tmp_path) -> None:
    """Saved and closed an instant before the stop signal, then killed by it: no look of the
    loop saw it (one look every 30 s here), the look at the stop did, so it goes up."""
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=10.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events, poll_seconds=30.0)
    hook.before_stages(runner)
    proc = _start(SAVER, Path(plan.workdir) / "ckpt.pt", 0.0, 1, "wait")
    _read_until(proc, "saved")
    hook.stopping()  # the runner, before the stop signal
    proc.terminate()  # no handler: it dies of SIGTERM at once
    assert proc.wait(10) == -15
    runner.exit_code = 143
    assert hook.after_stages(runner, "preempted") is None
    hook.close()
    assert [_whole(d) for d in _copied(tmp_path, "ckpt.pt")] == [1]


def test_a_checkpoint_the_stop_kills_mid_write_is_not_mirrored(tmp_path) -> None:
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=0.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    proc = _start(SAVER, Path(plan.workdir) / "ckpt.pt", 0.3, 2, "open")
    _read_until(proc, "saved 1")
    wait_until(lambda: events.of("checkpoint.uploaded"), 10, message="the first save's copy")
    _read_until(proc, "writing")
    time.sleep(0.3)  # the loop looks at the half-written one a few times
    hook.stopping()
    proc.kill()
    proc.wait(10)
    time.sleep(0.5)  # looks between the kill and the end of the stages (a loaded node)
    runner.exit_code = 137
    hook.after_stages(runner, "preempted")
    hook.close()
    assert [_whole(d) for d in _copied(tmp_path, "ckpt.pt")] == [1]
    assert len(events.of("checkpoint.uploaded")) == 1


def test_a_version_whose_writer_was_killed_is_never_copied_however_long_it_stays(
    tmp_path,
) -> None:
    """The writer dies mid-write (the stop's SIGKILL, or the kernel's OOM killer while the
    job runs): its death closes the half-written file, which then stands still. The looks
    that come before the stages are down (many here) must not take it for complete."""
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=0.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    proc = _start(SAVER, Path(plan.workdir) / "ckpt.pt", 0.3, 2, "open")
    _read_until(proc, "saved 1")
    wait_until(lambda: events.of("checkpoint.uploaded"), 10, message="the first save's copy")
    _read_until(proc, "writing")
    time.sleep(0.3)  # looks see the half-written version held open
    proc.kill()  # no stopping(): killed while the job runs
    proc.wait(10)
    time.sleep(1.0)  # twenty looks at a closed version that does not change
    assert len(events.of("checkpoint.uploaded")) == 1
    hook.stopping()
    runner.exit_code = 137
    hook.after_stages(runner, "preempted")
    hook.close()
    assert [_whole(d) for d in _copied(tmp_path, "ckpt.pt")] == [1]
    assert len(events.of("checkpoint.uploaded")) == 1


def test_the_last_save_of_a_job_that_ends_on_its_own_is_mirrored(tmp_path) -> None:
    """The job saves and exits 0 before any look saw the save (one look every 30 s): it
    closed what it wrote, so it goes up at the end."""
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=10.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events, poll_seconds=30.0)
    hook.before_stages(runner)
    proc = _start(SAVER, Path(plan.workdir) / "ckpt.pt", 0.0, 2, "exit")
    assert proc.wait(30) == 0
    runner.exit_code = 0
    hook.after_stages(runner, "succeeded")
    hook.close()
    assert [_whole(d) for d in _copied(tmp_path, "ckpt.pt")] == [2]


def test_a_directory_written_in_place_file_by_file_goes_up_whole(tmp_path) -> None:
    """transformers 5.x: ``checkpoint-N`` made in place, a pause with nothing open between
    its files: every copy holds all three files, and each save goes up (settle 10 s)."""
    plan = _plan(tmp_path, "a", ["out/checkpoint-*"], checkpoint_settle_s=10.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    proc = _start(HF_DIR, Path(plan.workdir) / "out", 1.5, 3)
    assert proc.wait(60) == 0
    live = len(events.of("checkpoint.uploaded"))
    runner.exit_code = 0
    hook.after_stages(runner, "succeeded")
    hook.close()
    assert live >= 2  # while the job ran
    snaps = _snapshots(tmp_path)
    assert [s["path"] for s in snaps] == [f"out/checkpoint-{n}" for n in (1, 2, 3)]
    for snap in snaps:
        assert set(snap["files"]) == {"model.safetensors", "optimizer.pt", "trainer_state.json"}


def test_a_checkpoint_that_never_stands_still_is_a_warning_while_the_job_runs(tmp_path) -> None:
    """Held open for writing all the time: no version can be copied. A few settle periods
    on, a ``checkpoint.warning`` says so while the job still runs (not after it ended)."""
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=1.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    proc = _start(SAVER, Path(plan.workdir) / "ckpt.pt", 0.0, 1, "open")
    try:
        _read_until(proc, "writing")
        wait_until(lambda: events.of("checkpoint.warning"), 15, message="the warning")
        assert proc.poll() is None  # the job still runs
        [warning] = events.of("checkpoint.warning")
        assert "ckpt.pt" in warning["message"] and "could be copied" in warning["message"]
        assert hook.status()["checkpoint_mirror"]["warning"] == warning["message"]
    finally:
        hook.stopping()
        proc.kill()
        proc.wait(10)
    runner.exit_code = 137
    hook.after_stages(runner, "preempted")
    hook.close()
    assert not events.of("checkpoint.uploaded")


def test_a_path_that_matches_nothing_while_the_job_progresses_is_a_warning_early(
    tmp_path,
) -> None:
    """The job reports steps, the path matches nothing: said after three settle periods,
    while the job runs."""
    plan = _plan(tmp_path, "a", ["out/ckpt.pt"], checkpoint_settle_s=1.0)
    events, runner = Events(), FakeRunner(step=None)
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    (Path(plan.workdir) / "model.pt").write_bytes(b"saved elsewhere")
    time.sleep(0.5)
    runner.step = 40
    wait_until(lambda: events.of("checkpoint.warning"), 15, message="the warning")
    [warning] = events.of("checkpoint.warning")
    assert "out/ckpt.pt" in warning["message"] and "train at step 40" in warning["message"]
    assert "but the job wrote model.pt" in warning["message"] and warning["found"] == "model.pt"
    assert warning["after_s"] >= 3.0
    runner.exit_code = 0
    hook.after_stages(runner, "succeeded")
    hook.close()
    assert len(events.of("checkpoint.warning")) == 1  # not said again at the end
    assert hook.status()["checkpoint_mirror"]["warning"] == warning["message"]


def test_with_nothing_like_a_checkpoint_in_the_workdir_the_warning_waits_for_the_first_save(
    tmp_path, monkeypatch
) -> None:
    """A job whose first save is late (the HF Trainer's every 500 steps) has lost nothing yet:
    with nothing checkpoint-like written (an empty ``checkpoints/`` made at start-up, a log
    file), the path matching nothing is said only after ``NO_EVIDENCE_AFTER_S``."""
    monkeypatch.setattr(mirror_advice, "NO_EVIDENCE_AFTER_S", 6.0)
    plan = _plan(tmp_path, "a", ["out/ckpt.pt"], checkpoint_settle_s=0.5)
    events, runner = Events(), FakeRunner(step=None)
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    work = Path(plan.workdir)
    (work / "checkpoints").mkdir()
    (work / "train.log").write_text("step 40\n")
    runner.step = 40
    time.sleep(4.0)  # past three settle periods and the 3 s floor
    assert not events.of("checkpoint.warning")
    wait_until(lambda: events.of("checkpoint.warning"), 15, message="the late warning")
    [warning] = events.of("checkpoint.warning")
    assert "nothing there looks like a checkpoint" in warning["message"]
    assert warning["after_s"] >= 6.0 and "found" not in warning
    runner.exit_code = 0
    hook.after_stages(runner, "succeeded")
    hook.close()


def test_checkpoint_like_names() -> None:
    like = ["checkpoint-500", "ckpt.pt", "last.pt", "model.safetensors", "epoch=3-step=9.ckpt"]
    assert all(mirror_advice.looks_like_checkpoint(n) for n in like)
    unlike = ["train.py", "checkpointing.py", "data.csv", "lastly.txt", "out", "train.log"]
    assert not any(mirror_advice.looks_like_checkpoint(n) for n in unlike)


def test_a_path_that_matches_nothing_without_progress_is_said_only_at_the_end(tmp_path) -> None:
    plan = _plan(tmp_path, "a", ["out/ckpt.pt"], checkpoint_settle_s=0.5)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    time.sleep(4.0)  # past three settle periods (and the 3 s floor), no step, no log
    assert not events.of("checkpoint.warning")
    runner.exit_code = 0
    hook.after_stages(runner, "succeeded")
    hook.close()
    assert len(events.of("checkpoint.warning")) == 1


def test_a_job_that_starts_far_below_the_restored_step_is_a_warning(tmp_path) -> None:
    """Each copy keeps the stages' steps; after a restore, a first step far below the
    restored one means the script started again (no resume_args): a warning, at once."""
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=10.0)
    events, runner = Events(), FakeRunner(step=120)
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    (Path(plan.workdir) / "ckpt.pt").write_bytes(b"step 120")
    wait_until(lambda: events.of("checkpoint.uploaded"), 10, message="the upload")
    runner.exit_code = 143
    hook.after_stages(runner, "preempted")
    hook.close()
    [snap] = _snapshots(tmp_path)
    assert snap["steps"] == {"train": 120}

    for first, warned in ((121, False), (1, True)):
        plan2 = _plan(tmp_path, f"b{first}", ["ckpt.pt"], attempt=2)
        events2, runner2 = Events(), FakeRunner()
        hook2 = _mirror(plan2, events2)
        hook2.before_stages(runner2)
        assert runner2.resume is not None
        # a bar drawn at 0 before the job knows where it is (the HF Trainer resumed draws
        # 0/N, then the restored step + 1) is no start from scratch
        runner2.step = 0
        time.sleep(1.2)  # a few of the mirror's looks
        assert not events2.of("checkpoint.warning")
        runner2.step = first
        if warned:
            wait_until(lambda e=events2: e.of("checkpoint.warning"), 10, message="warning")
            [warning] = events2.of("checkpoint.warning")
            assert "step 1 " in warning["message"] and "saved at step 120" in warning["message"]
            assert "resume_args" in warning["message"]
        else:
            time.sleep(0.5)
        runner2.exit_code = 0
        hook2.after_stages(runner2, "succeeded")
        hook2.close()
        assert bool(events2.of("checkpoint.warning")) == warned, events2.items
        json.dumps(events2.items)  # events stay JSON


def test_through_a_real_agent_the_save_right_before_a_stop_goes_up(tmp_path, start_agent):
    """The runner tells the mirror before the stop signal: a script that saved in place
    (settle 10 s) and then dies of SIGTERM at once still has that save in storage."""
    from .helpers import make_plan

    script = SAVER.replace("time.sleep(60)", "time.sleep(60)  # until the stop")
    stage = {"name": "train", "run": "python save.py out/ckpt.pt 0 1 wait"}
    fields = {
        "checkpoint_paths": ["out/ckpt.pt"],
        "checkpoint_storage": str(tmp_path / "store"),
        "checkpoint_settle_s": 10.0,
    }
    plan = make_plan(tmp_path, [stage], **fields)
    (Path(plan.workdir) / "save.py").write_text(script)
    client = start_agent(plan)
    log = tmp_path / "state" / "logs" / "train.log"
    wait_until(lambda: log.is_file() and "saved 1" in log.read_text(), 30, message="the save")
    client.post("/stop")
    status = client.wait_finished(30)
    assert status["phase"] == "stopped"
    [stage_status] = status["stages"]
    assert stage_status["exit_code"] == 143  # killed by the signal, nothing saved on it
    copies = [_whole(d) for d in _copied(tmp_path, "out/ckpt.pt")]
    assert copies == [1], status
