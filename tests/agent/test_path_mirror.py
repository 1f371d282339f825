"""The mirror of ``checkpoints.path``: checkpoints a script writes on its own, mirrored when
settled, restored (newest complete first) before the next attempt, and resumed from."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from corral.agent.path_mirror import PathMirror, find_items
from corral.wire.plan import AgentPlan
from support.waiting import wait_until

from .helpers import make_plan


class Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def emit(self, type: str, stage: str | None = None, data: dict | None = None) -> dict:
        event = {"type": type, "stage": stage, "data": data or {}}
        self.items.append(event)
        return event

    def of(self, type: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.items if e["type"] == type]


class FakeRunner:
    """The runner as a hook sees it: one stage ``train`` with its exit code (None while it
    runs) and its progress step (None: none read)."""

    started_at = 0.0
    gang_nodes: list = []

    def __init__(self, exit_code: int | None = None, step: int | None = None) -> None:
        self.resume: str | None = None
        self.exit_code = exit_code
        self.step = step

    def request_stop(self, reason: str = "", cause: Any = None) -> None:
        """The mirror never stops the attempt: nothing to do."""

    def status(self) -> dict[str, Any]:
        progress = None if self.step is None else {"step": self.step}
        return {"stages": [{"name": "train", "exit_code": self.exit_code, "progress": progress}]}

    def set_resume(self, path: str) -> None:
        self.resume = path


def _plan(tmp_path: Path, name: str, paths: list[str], **fields: Any) -> AgentPlan:
    base = tmp_path / name
    base.mkdir(exist_ok=True)
    values: dict[str, Any] = {
        "checkpoint_paths": paths,
        "checkpoint_storage": str(tmp_path / "store"),
        "checkpoint_settle_s": 5.0,
    }
    values.update(fields)
    return make_plan(base, [{"name": "train", "run": "true"}], **values)


def _write_renamed(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    old = time.time_ns() - 2_000_000_000
    os.utime(tmp, ns=(old, old))  # written a while ago, then moved into place: ctime > mtime
    os.replace(tmp, path)


def _snapshots(tmp_path: Path) -> list[dict[str, Any]]:
    root = tmp_path / "store" / "run-1" / "mirror"
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if (d / "COMPLETE").is_file():
            out.append(json.loads((d / "COMPLETE").read_text()))
    return out


def _mirror(plan: AgentPlan, events: Events, **kw: Any) -> PathMirror:
    return PathMirror(plan, events, environ={}, **{"poll_seconds": 0.05, **kw})


def test_a_renamed_file_is_mirrored_at_once_and_restored_on_another_machine(tmp_path) -> None:
    plan = _plan(tmp_path, "a", ["ckpt.pt"])
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    assert hook.before_stages(runner) is None and runner.resume is None
    _write_renamed(Path(plan.workdir) / "ckpt.pt", b"step 7")
    wait_until(lambda: events.of("checkpoint.uploaded"), 10, message="the upload")
    assert hook.after_stages(runner, "preempted") is None
    hook.close()
    [up] = events.of("checkpoint.uploaded")
    assert up["name"] == "ckpt.pt" and up["bytes"] == 6 and up["lag_s"] >= 0
    assert not events.of("checkpoint.warning")
    [snap] = _snapshots(tmp_path)
    assert snap["path"] == "ckpt.pt" and snap["files"][""]["size"] == 6

    # another machine: an empty workdir of its own, the same storage
    plan2 = _plan(tmp_path, "b", ["ckpt.pt"], attempt=2)
    events2, runner2 = Events(), FakeRunner()
    hook2 = _mirror(plan2, events2)
    assert hook2.before_stages(runner2) is None
    restored = Path(plan2.workdir) / "ckpt.pt"
    assert runner2.resume == str(restored) and restored.read_bytes() == b"step 7"
    [ev] = events2.of("checkpoint.restored")
    assert ev["name"] == "ckpt.pt" and ev["bytes"] == 6 and ev["path"] == str(restored)
    hook2.after_stages(runner2, "succeeded")
    hook2.close()
    assert not events2.of("checkpoint.uploaded")  # what was restored is not sent back


def test_a_file_saved_under_another_name_and_replaced_is_mirrored_before_it_settles(
    tmp_path,
) -> None:
    """``torch.save(state, "ckpt.tmp"); os.replace("ckpt.tmp", "ckpt.pt")``: the rename often
    shares the last write's timestamp tick, yet the new inode at the path was written before
    the previous look, so it was moved in whole."""
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=60.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    work = Path(plan.workdir)
    for n in (1, 2):
        (work / "ckpt.tmp").write_bytes(b"state %d" % n)
        time.sleep(0.2)  # the agent looks meanwhile (its poll: 0.05 s)
        os.replace(work / "ckpt.tmp", work / "ckpt.pt")
        wait_until(lambda n=n: len(events.of("checkpoint.uploaded")) == n, 10, message="upload")
    hook.after_stages(runner, "succeeded")
    hook.close()
    assert [s["files"][""]["size"] for s in _snapshots(tmp_path)] == [7, 7]


def test_a_file_replaced_by_a_rename_counts_at_once_but_not_one_still_open(tmp_path) -> None:
    """Another inode at the path than at the last look: replaced through a rename, even
    when the rename shares the last write's tick. A file deleted and written again in place
    is another inode too, but its writer still holds it open: not taken, nor after a stop
    that killed the writer."""
    plan = _plan(tmp_path, "a", ["ckpt.pt"], checkpoint_settle_s=60.0)
    work = Path(plan.workdir)
    (work / "ckpt.pt").write_bytes(b"from before")
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    time.sleep(0.2)
    with open(work / "ckpt.tmp", "wb") as f:
        f.write(b"saved")
    os.replace(work / "ckpt.tmp", work / "ckpt.pt")  # at once, in the tick of the write
    wait_until(lambda: events.of("checkpoint.uploaded"), 10, message="the upload")
    os.remove(work / "ckpt.pt")
    with open(work / "ckpt.pt", "wb") as f:  # in place, under a new inode, still writing
        f.write(b"half")
        f.flush()
        time.sleep(0.5)
        assert len(events.of("checkpoint.uploaded")) == 1
        hook.stopping()
        runner.exit_code = 143  # the writer died of the stop signal
        hook.after_stages(runner, "preempted")
    hook.close()
    assert [s["files"][""]["size"] for s in _snapshots(tmp_path)] == [5]


def test_a_file_written_in_place_is_mirrored_once_closed_and_unchanged(tmp_path) -> None:
    """Written in place (no rename): copied once no process holds it open for writing and
    two looks found it the same, long before ``checkpoints.settle`` (60 s here); not while
    its writer holds it open, however long it has been unchanged."""
    plan = _plan(tmp_path, "a", ["out/ckpt.pt"], checkpoint_settle_s=60.0)
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    target = Path(plan.workdir) / "out" / "ckpt.pt"
    target.parent.mkdir()
    with open(target, "wb") as f:
        f.write(b"x" * 100)
        f.flush()
        time.sleep(0.5)  # ten looks: unchanged, but open
        assert not events.of("checkpoint.uploaded")
    wait_until(lambda: events.of("checkpoint.uploaded"), 5, message="the upload")
    hook.after_stages(runner, "succeeded")
    hook.close()
    assert [s["path"] for s in _snapshots(tmp_path)] == ["out/ckpt.pt"]


def test_a_checkpoint_killed_mid_write_is_never_restored(tmp_path) -> None:
    plan = _plan(tmp_path, "a", ["ckpt.pt"])
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    target = Path(plan.workdir) / "ckpt.pt"
    _write_renamed(target, b"good step 10")
    wait_until(lambda: events.of("checkpoint.uploaded"), 10, message="the upload")
    with open(target, "r+b") as f:  # rewritten in place; the job dies half way
        f.write(b"torn")
        f.flush()
        hook.stopping()  # the stop comes while it writes
        runner.exit_code = 137
        assert hook.after_stages(runner, "preempted") is None
    hook.close()
    assert len(events.of("checkpoint.uploaded")) == 1  # the torn file was not mirrored

    # the same machine: the torn local file is replaced with the mirrored one
    events2, runner2 = Events(), FakeRunner()
    hook2 = _mirror(plan.model_copy(update={"attempt": 2}), events2)
    hook2.before_stages(runner2)
    hook2.close()
    assert target.read_bytes() == b"good step 10" and runner2.resume == str(target)


def test_a_torn_checkpoint_an_earlier_attempt_left_is_not_mirrored_later(tmp_path) -> None:
    """HF-style: checkpoint-10 mirrored, checkpoint-20 torn when the job died; the next
    attempt on the same machine restores checkpoint-10 and never sends checkpoint-20 up,
    however quiet it is, unless the job writes it again."""
    plan = _plan(tmp_path, "a", ["out/checkpoint-*"], checkpoint_settle_s=0.0)
    out = Path(plan.workdir) / "out"
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    (out / "checkpoint-10").mkdir(parents=True)
    (out / "checkpoint-10" / "model.bin").write_bytes(b"ten")
    wait_until(lambda: events.of("checkpoint.uploaded"), 10, message="the upload")
    hook._stop.set()
    hook._thread.join()
    hook._thread = None  # the machine died: no last look
    (out / "checkpoint-20").mkdir()
    (out / "checkpoint-20" / "model.bin").write_bytes(b"tw")  # torn

    events2, runner2 = Events(), FakeRunner()
    hook2 = _mirror(plan.model_copy(update={"attempt": 2}), events2)
    hook2.before_stages(runner2)
    assert runner2.resume == str(out / "checkpoint-10")
    time.sleep(0.3)
    hook2.after_stages(runner2, "preempted")
    hook2.close()
    assert not events2.of("checkpoint.uploaded")
    assert [s["path"] for s in _snapshots(tmp_path)] == ["out/checkpoint-10"]


def test_lightning_checkpoints_are_found_under_any_version_directory(tmp_path) -> None:
    work = tmp_path / "w"
    for version, name in (("version_0", "epoch=0-step=10.ckpt"), ("version_1", "last.ckpt")):
        target = work / "lightning_logs" / version / "checkpoints" / name
        target.parent.mkdir(parents=True)
        target.write_bytes(b"x")
    (work / "lightning_logs" / "version_1" / "hparams.yaml").write_text("lr: 1\n")
    items = find_items(str(work), ["lightning_logs/**/checkpoints/*.ckpt"])
    assert sorted(i.rel for i in items) == [
        "lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt",
        "lightning_logs/version_1/checkpoints/last.ckpt",
    ]
    assert all(i.kind == "file" for i in items)


def test_a_file_that_changes_while_uploaded_is_not_published(tmp_path, monkeypatch) -> None:
    import corral.agent.mirror_snapshots as pm

    plan = _plan(tmp_path, "a", ["ckpt.pt"])
    target = Path(plan.workdir) / "ckpt.pt"
    _write_renamed(target, b"v1")
    events = Events()
    hook = _mirror(plan, events)
    hook.snapshots()
    real_put = pm._put

    def put_then_change(storage, src, dst, size):
        digest = real_put(storage, src, dst, size)
        target.write_bytes(b"v2 longer")
        return digest

    monkeypatch.setattr(pm, "_put", put_then_change)
    [item] = find_items(plan.workdir, ["ckpt.pt"])
    hook._upload(item, time.time())
    assert _snapshots(tmp_path) == [] and not events.of("checkpoint.uploaded")
    assert not (tmp_path / "store" / "run-1" / "mirror" / "0000000001").exists()


def test_directories_newest_restored_corrupt_skipped_and_retention(tmp_path) -> None:
    plan = _plan(tmp_path, "a", ["out/checkpoint-*"], checkpoint_policy={"keep_last": 2})
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    out = Path(plan.workdir) / "out"
    for step in (100, 200, 300):
        staging = out / f"tmp-checkpoint-{step}"
        (staging / "sub").mkdir(parents=True)
        (staging / "model.bin").write_bytes(b"m" * step)
        (staging / "sub" / "state.json").write_text(json.dumps({"step": step}))
        old = time.time_ns() - 2_000_000_000
        for f in (staging / "model.bin", staging / "sub" / "state.json", staging):
            os.utime(f, ns=(old, old))
        os.replace(staging, out / f"checkpoint-{step}")
        n = step // 100
        wait_until(lambda n=n: len(events.of("checkpoint.uploaded")) == n, 10, message="upload")
    hook.after_stages(runner, "succeeded")
    hook.close()
    snaps = _snapshots(tmp_path)
    assert [s["path"] for s in snaps] == ["out/checkpoint-200", "out/checkpoint-300"]
    assert set(snaps[-1]["files"]) == {"model.bin", "sub/state.json"}

    # corrupt the newest in storage: the one before is restored instead
    root = tmp_path / "store" / "run-1" / "mirror"
    newest = sorted(root.iterdir())[-1]
    (newest / "files" / "out" / "checkpoint-300" / "model.bin").write_bytes(b"x" * 300)
    plan2 = _plan(tmp_path, "b", ["out/checkpoint-*"], attempt=2)
    events2, runner2 = Events(), FakeRunner()
    hook2 = _mirror(plan2, events2)
    hook2.before_stages(runner2)
    hook2.close()
    [skipped] = events2.of("checkpoint.skipped")
    assert skipped["name"] == "out/checkpoint-300" and "sha256" in skipped["reason"]
    dest = Path(plan2.workdir) / "out" / "checkpoint-200"
    assert runner2.resume == str(dest)
    assert json.loads((dest / "sub" / "state.json").read_text()) == {"step": 200}
    assert not (Path(plan2.workdir) / "out" / "checkpoint-300").exists()
    assert not list((Path(plan2.workdir) / "out").glob("*.corral-*"))


def test_storage_set_and_nothing_at_the_path_warns(tmp_path) -> None:
    plan = _plan(tmp_path, "a", ["ckpt.pt"])
    events, runner = Events(), FakeRunner()
    hook = _mirror(plan, events)
    hook.before_stages(runner)
    (Path(plan.workdir) / "model.pt").write_bytes(b"saved elsewhere")
    hook.after_stages(runner, "succeeded")
    hook.close()
    [warning] = events.of("checkpoint.warning")
    assert "ckpt.pt" in warning["message"] and "nothing was mirrored" in warning["message"]
    assert hook.status()["checkpoint_mirror"]["warning"] == warning["message"]


def test_without_storage_the_newest_local_checkpoint_is_resumed_from(tmp_path) -> None:
    plan = _plan(tmp_path, "a", ["runs/*/weights/last.pt"], checkpoint_storage=None)
    _write_renamed(Path(plan.workdir) / "runs" / "exp" / "weights" / "last.pt", b"w")
    first = FakeRunner()
    _mirror(plan, Events()).before_stages(first)
    assert first.resume is None  # a first attempt never resumes from what a run left
    plan = plan.model_copy(update={"attempt": 2})
    runner = FakeRunner()
    hook = _mirror(plan, Events())
    assert hook.before_stages(runner) is None
    assert hook.after_stages(runner, "succeeded") is None
    hook.close()
    assert runner.resume == str(Path(plan.workdir) / "runs" / "exp" / "weights" / "last.pt")


def test_the_agent_resumes_with_resume_args_and_env(tmp_path, start_agent) -> None:
    """Through a real agent: attempt 1 saves, attempt 2 on another workdir resumes."""
    script = (
        'echo "args=$* resume=${CORRAL_RESUME:-} from=${CORRAL_RESUME_FROM:-}" > seen.txt\n'
        "echo saved > ckpt.tmp && touch -d '-3 seconds' ckpt.tmp && mv ckpt.tmp ckpt.pt\n"
    )
    stage = {
        "name": "train",
        "run": "echo setting up\nbash train.sh --out x\n",  # a `run: |` block
        "resume_args": "--init_from=resume",
    }
    fields = {"checkpoint_paths": ["ckpt.pt"], "checkpoint_storage": str(tmp_path / "store")}
    (tmp_path / "a").mkdir()
    plan = make_plan(tmp_path / "a", [stage], **fields)
    (Path(plan.workdir) / "train.sh").write_text(script)
    status = start_agent(plan).wait_finished()
    assert status["phase"] == "succeeded", status["reason"]
    assert (Path(plan.workdir) / "seen.txt").read_text() == "args=--out x resume= from=\n"
    assert status["checkpoint_mirror"]["uploaded"] == 1

    (tmp_path / "b").mkdir()
    plan2 = make_plan(tmp_path / "b", [stage], attempt=2, **fields)
    (Path(plan2.workdir) / "train.sh").write_text(script)
    client = start_agent(plan2)
    status = client.wait_finished()
    assert status["phase"] == "succeeded"
    restored = Path(plan2.workdir) / "ckpt.pt"
    seen = (Path(plan2.workdir) / "seen.txt").read_text()
    assert seen == f"args=--out x --init_from=resume resume=1 from={restored}\n"
    assert status["checkpoint_mirror"]["restored"] == str(restored)


def test_storage_set_and_no_sdk_checkpoint_warns_too(tmp_path) -> None:
    """No ``checkpoints.path``: the SDK's checkpoint directory holding nothing corral
    recognises is said too (the nanoGPT run of the issue ended SUCCEEDED in silence)."""
    from corral.agent.checkpoint_sync import CheckpointSync

    plan = _plan(tmp_path, "a", [])
    (Path(plan.checkpoint_dir)).mkdir(parents=True)
    (Path(plan.checkpoint_dir) / "ckpt.pt").write_bytes(b"not corral's")
    events, runner = Events(), FakeRunner()
    sync = CheckpointSync(plan, events, environ={}, poll_seconds=0.05)
    assert sync.before_stages(runner) is None
    assert sync.after_stages(runner, "succeeded") is None
    sync.close()
    [warning] = events.of("checkpoint.warning")
    assert "checkpoints.path" in warning["message"]
    assert sync.status()["checkpoint_sync"]["warning"] == warning["message"]
