"""End of an attempt in the in-process agent: artifacts uploaded, manifest, acceptance."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from corral import __version__

from ..helpers import make_plan
from .helpers import read_json, sha256

TRAIN = (
    "mkdir -p outputs/tok eval && head -c 9500000 /dev/urandom > outputs/model.bin"
    " && echo vocab > outputs/tok/vocab.txt && echo noise > debug.log"
    ' && echo \'{"cer_clean": 0.02, "latency_p95_ms": 250}\' > eval/report.json'
)


def _plan(tmp_path: Path, run: str = TRAIN, **fields):
    fields.setdefault("artifacts", {"paths": ["outputs/**"], "storage": str(tmp_path / "bucket")})
    fields.setdefault("eval", {"report": "eval/report.json"})
    return make_plan(
        tmp_path,
        [{"name": "train", "run": run}],
        run_name="asr",
        spec_hash="ab" * 32,
        hourly_price=3.6,
        cost_offset_usd=1.5,
        **fields,
    )


def test_artifacts_are_uploaded_with_correct_sha256s_in_the_manifest(tmp_path, start_agent):
    plan = _plan(tmp_path)
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "succeeded", status
    work, run_root = Path(plan.workdir), tmp_path / "bucket" / "run-1"

    doc = read_json(run_root / "manifest.json")
    assert doc == read_json(Path(plan.state_dir) / "manifest.json")
    names = ["eval/report.json", "outputs/model.bin", "outputs/tok/vocab.txt"]
    assert sorted(doc["files"]) == names  # debug.log is not an artifact; the report is
    for rel in names:
        stored = run_root / "artifacts" / rel
        assert stored.read_bytes() == (work / rel).read_bytes()
        assert doc["files"][rel] == {"size": stored.stat().st_size, "sha256": sha256(stored)}
    assert doc["files"]["outputs/model.bin"]["size"] == 9_500_000
    assert doc["total_bytes"] == sum(f["size"] for f in doc["files"].values())
    assert (doc["run_id"], doc["run_name"], doc["attempt"], doc["attempts"]) == (
        "run-1",
        "asr",
        1,
        1,
    )
    assert doc["spec_hash"] == "ab" * 32 and doc["corral_version"] == __version__
    assert doc["git"] is None  # the workdir is not in a git repository
    assert doc["artifacts_uri"] == str(run_root / "artifacts") and doc["upload_error"] is None
    [stage] = doc["stages"]
    assert stage["name"] == "train" and stage["state"] == "succeeded" and stage["exit_code"] == 0
    assert stage["started_at"] and stage["finished_at"] and stage["duration_s"] >= 0
    cost = doc["cost"]
    assert cost["earlier_attempts_usd"] == 1.5 and cost["hourly_price"] == 3.6
    assert 0 < cost["attempt_seconds"] < 60
    assert abs(cost["attempt_usd"] - 3.6 * cost["attempt_seconds"] / 3600) < 1e-5
    assert abs(cost["total_usd"] - 1.5 - cost["attempt_usd"]) < 1e-5
    assert doc["eval"]["report"] == "eval/report.json" and doc["eval"]["all_pass"] is True

    by_type = {e["type"]: e["data"] for e in client.events()}
    assert by_type["artifacts.uploaded"]["files"] == 3
    assert by_type["artifacts.uploaded"]["bytes"] == doc["total_bytes"]
    assert by_type["manifest.written"]["uri"] == str(run_root / "manifest.json")
    summary = status["manifest"]
    assert summary["uri"] == str(run_root / "manifest.json")
    assert (summary["files"], summary["bytes"]) == (3, doc["total_bytes"])


def test_without_storage_artifacts_stay_local_and_are_listed(tmp_path, start_agent):
    plan = _plan(tmp_path, artifacts={"paths": ["outputs/**"]}, eval={})
    status = start_agent(plan).wait_finished()
    assert status["phase"] == "succeeded"
    doc = read_json(Path(plan.state_dir) / "manifest.json")
    assert sorted(doc["files"]) == ["outputs/model.bin", "outputs/tok/vocab.txt"]
    assert doc["storage"] is None and doc["artifacts_uri"] is None and doc["eval"] is None
    assert status["manifest"]["uri"] is None and status.get("acceptance") is None
    assert not (tmp_path / "bucket").exists()


def test_acceptance_results_are_in_the_status_the_events_and_the_manifest(tmp_path, start_agent):
    criteria = [
        {"metric": "cer_clean", "op": "<=", "value": 0.03},
        {"metric": "latency_p95_ms", "op": "<=", "value": 200},
        {"metric": "cer_degraded", "op": "<=", "value": 0.1},
    ]
    plan = _plan(tmp_path, eval={"report": "eval/report.json", "acceptance": criteria})
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "succeeded"  # fail_run_on_reject is off
    result = status["acceptance"]
    assert [(r["observed"], r["passed"]) for r in result["criteria"]] == [
        (0.02, True),
        (250, False),
        (None, False),
    ]
    assert result["criteria"][2]["note"] == "metric 'cer_degraded' is not in the report"
    assert result["all_pass"] is False
    [event] = [e for e in client.events() if e["type"] == "eval.acceptance"]
    assert event["data"] == result
    assert read_json(Path(plan.state_dir) / "manifest.json")["eval"] == result


def test_fail_run_on_reject_turns_the_succeeded_attempt_failed(tmp_path, start_agent):
    criteria = [{"metric": "latency_p95_ms", "op": "<=", "value": 200}]
    rejecting = {"report": "eval/report.json", "acceptance": criteria, "fail_run_on_reject": True}
    plan = _plan(tmp_path, eval=rejecting)
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "failed"
    assert status["reason"] == "acceptance failed: latency_p95_ms = 250 (needs <= 200)"
    finished = next(e for e in client.events() if e["type"] == "attempt.finished")["data"]
    assert finished["phase"] == "failed" and "latency_p95_ms" in finished["reason"]
    assert (tmp_path / "bucket" / "run-1" / "manifest.json").exists()

    passing = dict(rejecting, acceptance=[{"metric": "cer_clean", "op": "<", "value": 0.03}])
    other = tmp_path / "other"
    other.mkdir()
    status = start_agent(_plan(other, eval=passing)).wait_finished()
    assert status["phase"] == "succeeded" and status["acceptance"]["all_pass"] is True


def test_a_stopped_attempt_still_writes_its_manifest(tmp_path, start_agent):
    run = "mkdir -p outputs && echo partial > outputs/step-10.txt && touch started && sleep 30"
    plan = _plan(tmp_path, run=run)
    client = start_agent(plan)
    client.wait_until(lambda s: (Path(plan.workdir) / "started").exists())
    assert client.post("/stop")[0] == 202
    status = client.wait_finished()
    assert status["phase"] == "stopped"
    doc = read_json(tmp_path / "bucket" / "run-1" / "manifest.json")
    assert doc["phase"] == "stopped" and list(doc["files"]) == ["outputs/step-10.txt"]
    assert doc["stages"][0]["state"] == "stopped"
    assert doc["eval"]["status"] == "missing"
    assert (tmp_path / "bucket/run-1/artifacts/outputs/step-10.txt").read_text() == "partial\n"


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_workdir_git_commit_and_dirty_flag_are_recorded(tmp_path, start_agent):
    repo = tmp_path / "repo"
    work = repo / "train"
    work.mkdir(parents=True)
    (work / "train.py").write_text("print('v1')\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "v1")
    head = _git(repo, "rev-parse", "HEAD")
    plan = _plan(tmp_path, run="mkdir -p outputs && echo w > outputs/w.txt", workdir=str(work))
    assert start_agent(plan).wait_finished()["phase"] == "succeeded"
    doc = read_json(Path(plan.state_dir) / "manifest.json")
    assert doc["git"] == {"commit": head, "dirty": False}  # untracked outputs are not "dirty"

    (work / "train.py").write_text("print('v2')\n")
    again = tmp_path / "again"
    again.mkdir()
    plan = _plan(again, run="true", workdir=str(work))
    assert start_agent(plan).wait_finished()["phase"] == "succeeded"
    assert json.loads((again / "state" / "manifest.json").read_text())["git"] == {
        "commit": head,
        "dirty": True,
    }
