"""Uploads to artifact storage across attempts, and what an upload failure does."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.agent import artifacts as artifacts_mod
from corral.agent.artifacts import ArtifactsHook
from corral.agent.events import EventLog
from corral.sdk import storage as storage_mod
from support.waiting import wait_until

from ..helpers import make_plan
from .helpers import FakeRunner, read_json

NOW = 1_800_000_000.0


def _hook(tmp_path: Path, attempt: int, storage: str, **kw) -> tuple[ArtifactsHook, EventLog]:
    state = tmp_path / f"state-a{attempt}"
    state.mkdir()
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "true"}],
        attempt=attempt,
        state_dir=str(state),
        hourly_price=2.0,
        artifacts={"paths": ["out/**"], "storage": storage},
    )
    events = EventLog(state / "events.jsonl", now=lambda: NOW)
    hook = ArtifactsHook(plan, events, now=lambda: NOW, sleep=lambda s: None, **kw)
    return hook, events


def _write(work: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)


def test_a_later_attempt_uploads_only_changed_files_and_its_own_manifest(tmp_path):
    work, bucket = tmp_path / "work", tmp_path / "bucket"
    _write(work, {"out/a.txt": "a", "out/b.txt": "b1"})
    hook, events = _hook(tmp_path, 1, str(bucket))
    assert hook.after_stages(FakeRunner(NOW - 1800), "preempted") is None
    first = read_json(bucket / "run-1" / "manifest.json")
    assert first["attempt"] == 1 and first["cost"]["attempt_usd"] == 1.0

    _write(work, {"out/b.txt": "b2", "out/c.txt": "c"})
    hook2, events2 = _hook(tmp_path, 2, str(bucket))
    assert hook2.after_stages(FakeRunner(NOW - 60), "succeeded") is None
    second = read_json(bucket / "run-1" / "manifest.json")
    assert second["attempt"] == 2 and sorted(second["files"]) == [
        "out/a.txt",
        "out/b.txt",
        "out/c.txt",
    ]
    assert (bucket / "run-1/artifacts/out/b.txt").read_text() == "b2"
    [uploaded] = [e["data"] for e in events2.after(0)[0] if e["type"] == "artifacts.uploaded"]
    assert (uploaded["uploaded"], uploaded["unchanged"], uploaded["files"]) == (2, 1, 3)
    for hook_ in (hook, hook2):
        hook_.close()
    events.close()
    events2.close()


class _BrokenStorage(storage_mod.LocalStorage):
    """Local storage whose writes fail for one file name."""

    def __init__(self, bad: str):
        self.bad = bad
        self.calls = 0

    def open_write(self, path: str):
        self.calls += 1
        if path.endswith(self.bad):
            raise OSError(f"upload of {self.bad} refused")
        return super().open_write(path)


def test_an_upload_failure_fails_the_attempt_and_leaves_no_stale_manifest(tmp_path, monkeypatch):
    work, bucket = tmp_path / "work", tmp_path / "bucket"
    _write(work, {"out/a.txt": "a", "out/b.txt": "b1"})
    hook, events = _hook(tmp_path, 1, str(bucket))
    assert hook.after_stages(FakeRunner(NOW), "succeeded") is None
    assert (bucket / "run-1" / "manifest.json").exists()

    _write(work, {"out/b.txt": "b2"})
    broken = _BrokenStorage("b.txt")
    real_resolve = storage_mod.resolve_location
    monkeypatch.setattr(storage_mod, "resolve_location", lambda uri: (broken, real_resolve(uri)[1]))
    monkeypatch.setattr(artifacts_mod, "UPLOAD_TRIES", 2)
    hook2, events2 = _hook(tmp_path, 2, str(bucket))
    reason = hook2.after_stages(FakeRunner(NOW), "succeeded")
    assert reason == "artifacts upload failed: OSError: upload of b.txt refused"
    assert broken.calls == 2  # retried, then given up
    # the old manifest no longer describes the files beside it, so it is gone
    assert not (bucket / "run-1" / "manifest.json").exists()
    local = read_json(tmp_path / "state-a2" / "manifest.json")
    assert local["upload_error"] == "OSError: upload of b.txt refused"
    types = [e["type"] for e in events2.after(0)[0]]
    assert "agent.error" in types and "manifest.written" in types
    assert "artifacts.uploaded" not in types
    assert hook2.status()["manifest"]["upload_error"] == local["upload_error"]
    wait_until(
        lambda: hook2.package("results.tar.gz"), 10, 0.02, "the results package"
    )  # the local results are still packaged
    for hook_ in (hook, hook2):
        hook_.close()
    events.close()
    events2.close()


@pytest.mark.parametrize("uri", ["gs://bucket/runs", "file://otherhost/x"])
def test_an_unusable_storage_uri_is_a_clear_failure_reason(tmp_path, uri):
    _write(tmp_path / "work", {"out/a.txt": "a"})
    hook, events = _hook(tmp_path, 1, uri)
    reason = hook.after_stages(FakeRunner(NOW), "succeeded")
    assert reason is not None and reason.startswith("artifacts upload failed: BadInput: ")
    assert read_json(tmp_path / "state-a1" / "manifest.json")["files"]["out/a.txt"]["size"] == 1
    hook.close()
    events.close()
