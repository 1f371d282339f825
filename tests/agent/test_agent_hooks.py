"""Attempt hooks: work around the stages (checkpoint restore/upload, artifacts)."""

from __future__ import annotations

import threading
from pathlib import Path

from .helpers import make_plan


class Recorder:
    name = "recorder"

    def __init__(
        self,
        fail_before: str | None = None,
        fail_after: str | None = None,
        hold: threading.Event | None = None,
    ):
        self.calls: list[tuple[str, str | None]] = []
        self.fail_before, self.fail_after, self.hold = fail_before, fail_after, hold
        self.closed = False

    def before_stages(self, runner):
        self.calls.append(("before", None))
        return self.fail_before

    def after_stages(self, runner, phase):
        self.calls.append(("after", phase))
        if self.hold is not None:
            self.hold.wait(10)
        return self.fail_after

    def status(self):
        # ``notices``: the section a hook of a provider reports in (HOOK_SECTIONS); a key
        # outside those is left out of the status
        return {"notices": {"calls": len(self.calls)}, "recorder": "left out"}

    def close(self):
        self.closed = True


def test_hooks_run_around_the_stages_and_add_to_status(tmp_path: Path, start_agent) -> None:
    hook = Recorder()
    plan = make_plan(tmp_path, [{"name": "train", "run": "echo hi"}])
    client = start_agent(plan, hooks=[hook])
    status = client.wait_finished()
    assert status["phase"] == "succeeded"
    assert hook.calls == [("before", None), ("after", "succeeded")]
    assert status["notices"] == {"calls": 2} and "recorder" not in status


def test_a_failing_before_hook_fails_the_attempt_before_any_stage(tmp_path, start_agent) -> None:
    hook = Recorder(fail_before="no checkpoint storage")
    plan = make_plan(tmp_path, [{"name": "train", "run": "touch ran"}])
    client = start_agent(plan, hooks=[hook])
    status = client.wait_finished()
    assert status["phase"] == "failed" and status["reason"] == "no checkpoint storage"
    assert not (Path(plan.workdir) / "ran").exists()
    assert status["stages"][0]["state"] == "cancelled"


def test_the_phase_reads_finishing_while_after_hooks_work(tmp_path, start_agent) -> None:
    hold = threading.Event()
    hook = Recorder(fail_after="artifact upload failed", hold=hold)
    plan = make_plan(tmp_path, [{"name": "train", "run": "true"}])
    client = start_agent(plan, hooks=[hook])
    client.wait_until(lambda s: s["phase"] == "finishing")
    hold.set()
    status = client.wait_finished()
    assert status["phase"] == "failed" and status["reason"] == "artifact upload failed"


def test_a_hook_that_raises_is_a_failure_with_its_name(tmp_path, start_agent) -> None:
    class Broken(Recorder):
        name = "broken"

        def before_stages(self, runner):
            raise RuntimeError("boom")

    plan = make_plan(tmp_path, [{"name": "train", "run": "true"}])
    client = start_agent(plan, hooks=[Broken()])
    status = client.wait_finished()
    assert status["phase"] == "failed" and "broken: RuntimeError: boom" in status["reason"]
    assert "agent.error" in [e["type"] for e in client.events()]


class Stopping(Recorder):
    """A hook with ``stopping()``: it notes whether the stage had been signalled yet (the
    stage writes ``signalled`` on SIGTERM)."""

    def __init__(self, workdir: Path):
        super().__init__()
        self.workdir = workdir
        self.signalled_first: list[bool] = []

    def stopping(self):
        self.signalled_first.append((self.workdir / "signalled").exists())


def test_a_hook_hears_of_the_stop_before_the_stage_is_signalled(tmp_path, start_agent) -> None:
    script = "trap 'touch signalled; exit 0' TERM; touch started; while :; do sleep 0.05; done"
    plan = make_plan(tmp_path, [{"name": "train", "run": script}])
    work = Path(plan.workdir)
    hook, plain = Stopping(work), Recorder()  # a hook without stopping() is left alone
    client = start_agent(plan, hooks=[hook, plain])
    client.wait_until(lambda s: (work / "started").exists() and s["phase"] == "running")
    client.post("/stop")
    status = client.wait_finished()
    assert status["phase"] == "stopped" and (work / "signalled").exists()
    assert hook.signalled_first == [False]  # called once, before the signal
    assert hook.calls == plain.calls == [("before", None), ("after", "stopped")]


def test_a_gang_s_other_nodes_keep_their_manifest_the_run_s_storage_is_the_head_s(tmp_path):
    """Every node writes its manifest; only the head (rank 0) uploads the run's artifacts and
    manifest (two nodes writing ``<storage>/<run>/manifest.json`` would overwrite each other),
    and the head's says how many machines the gang had."""
    from corral.agent import manifest
    from corral.agent.artifacts import ArtifactsHook
    from corral.agent.events import EventLog
    from corral.agent.hooks import build_hooks
    from corral.wire.node import NodeContext

    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "true", "nodes": 2}],
        nodes=2,
        artifacts={"paths": ["out/*"], "storage": str(tmp_path / "store")},
    )
    events = EventLog(tmp_path / "events.jsonl")

    def storage(rank: int) -> str | None:
        context = NodeContext(plan, events, str(tmp_path), str(tmp_path), {}, node_rank=rank)
        (hook,) = [h for h in build_hooks(context) if isinstance(h, ArtifactsHook)]
        return hook.plan.artifacts.storage

    assert storage(0) == str(tmp_path / "store") and storage(1) is None
    fields = dict(
        run_id="r", run_name="n", attempt=1, phase="succeeded", reason="", spec_hash="h",
        created_at="t", git=None, stages=[], cost={}, storage=None, artifacts_uri=None,
        files={}, warnings=[], upload_error=None, eval=None,
    )  # fmt: skip
    assert manifest.build(**fields, nodes=2)["nodes"] == 2
    assert "nodes" not in manifest.build(**fields)  # one node: the manifest as before
    # each node's attempts, as the controller's books say, this one's ended as its phase
    from corral.wire.gang import NodeAttempt

    books = [
        NodeAttempt(rank=1, attempt=1, provider="p", instance_id="m-b", ended="preempted"),
        NodeAttempt(rank=0, attempt=2, provider="p", instance_id="m-a", zone="z1"),
        NodeAttempt(rank=0, attempt=1, provider="p", instance_id="m-a", zone="z1", ended="kept"),
        NodeAttempt(rank=1, attempt=2, provider="p", instance_id="m-c"),
    ]
    history = manifest.node_history(books, 2, "succeeded")
    doc = manifest.build(**fields, nodes=2, node_attempts=history)
    assert [(n["rank"], [(a["attempt"], a["instance_id"], a["ended"]) for a in n["attempts"]])
            for n in doc["node_attempts"]] == [
        (0, [(1, "m-a", "kept"), (2, "m-a", "succeeded")]),
        (1, [(1, "m-b", "preempted"), (2, "m-c", "succeeded")]),
    ]  # fmt: skip
    assert doc["node_attempts"][0]["attempts"][0] == {
        "attempt": 1, "provider": "p", "instance_id": "m-a", "region": None, "zone": "z1",
        "ended": "kept",
    }  # fmt: skip
    assert "node_attempts" not in manifest.build(**fields, node_attempts=history)  # one node
