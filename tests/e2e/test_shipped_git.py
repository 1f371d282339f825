"""Code from git on the fake cloud: the spec's ref is resolved to a commit at launch (shown by
``corral status``, written in the manifest), the machine clones it with a token from corral's
secrets (sent as HTTP auth, found in no file, log, event or answer), and local changes of the
checkout travel as a patch when asked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.providers.fake import ENV_FAKE_CLOUD
from corral.service.actions import wait_for_end
from corral.service.submit import submit_run
from corral.store import Store
from support.gitserver import GitHttpServer, git, make_repo

pytestmark = pytest.mark.slow
TOKEN = "ghp_G1tT0kenThatMustN3verLeak_424242"


def test_a_private_repository_at_a_branch_plus_local_changes_runs_on_a_fake_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corral_home: Path
) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({"launch_delay_s": 0.1}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    monkeypatch.setenv("GIT_TOKEN", TOKEN)  # a secret from the environment, as a CI would give
    _bare, checkout = make_repo(
        tmp_path / "repos",
        {
            "job.sh": 'echo "version $(cat version.txt)"; echo "local $(cat local.txt)"\n',
            "version.txt": "committed\n",
            "local.txt": "pushed\n",
        },
    )
    head = git("rev-parse", "HEAD", cwd=checkout)
    (checkout / "local.txt").write_text("changed here, not pushed\n")
    server = GitHttpServer(tmp_path / "repos", TOKEN)
    try:
        (checkout / "corral.yaml").write_text(
            f"""
name: from-git
run: bash job.sh
code:
  git: {server.url}/repo.git
  ref: main
  token_secret: GIT_TOKEN
  local_changes: diff
artifacts: {{storage: {tmp_path / "store"}}}
"""
        )
        git("add", "corral.yaml", cwd=checkout)  # tracked: the patch carries it too
        submitted = submit_run(checkout / "corral.yaml")
        run = wait_for_end(submitted.run.id, timeout_s=120)
    finally:
        server.close()
    assert run.state == "SUCCEEDED", run.reason
    assert any("code: git" in n and head[:12] in n for n in submitted.notices)
    runner = CliRunner()
    logs = runner.invoke(app, ["logs", run.id]).stdout
    assert "version committed" in logs and "local changed here, not pushed" in logs
    status = json.loads(runner.invoke(app, ["status", run.id, "--json"]).stdout)
    assert status["code"]["source"] == "git"
    assert status["code"]["git"] == {"url": f"{server.url}/repo.git", "ref": "main", "commit": head}
    assert f"@ {head[:12]} (main)" in runner.invoke(app, ["status", run.id]).stdout
    manifest = json.loads((tmp_path / "store" / run.id / "manifest.json").read_text())
    assert manifest["code"]["git"]["commit"] == head and manifest["git"]["commit"] == head
    assert server.seen_auth > 0
    # the token: in no file under CORRAL_HOME (the machines' disks included), no event
    leaks = [
        str(p) for p in corral_home.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()
    ]
    assert leaks == []
    for event in Store.open().events(run.id):
        assert TOKEN not in json.dumps({"reason": event.reason, "data": dict(event.data)})
    assert TOKEN not in json.dumps(status)
    assert os.environ["GIT_TOKEN"] == TOKEN


def test_a_dirty_checkout_is_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({"launch_delay_s": 0.1}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    bare, checkout = make_repo(tmp_path, {"job.sh": "cat version.txt\n", "version.txt": "v1\n"})
    (checkout / "version.txt").write_text("v2 (not committed)\n")
    (checkout / "corral.yaml").write_text(
        f"name: warned\nrun: bash job.sh\ncode: {{git: file://{bare}}}\n"
    )
    submitted = submit_run(checkout / "corral.yaml")
    assert any("uncommitted changes" in n and "local_changes: diff" in n for n in submitted.notices)
    run = wait_for_end(submitted.run.id, timeout_s=120)
    assert run.state == "SUCCEEDED", run.reason
    logs = CliRunner().invoke(app, ["logs", run.id]).stdout
    assert "v1" in logs and "v2" not in logs  # the machine has the pushed commit only


def test_a_workdir_shipped_from_a_dirty_checkout_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({"launch_delay_s": 0.1}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    _bare, checkout = make_repo(tmp_path, {"job.sh": "cat version.txt\n", "version.txt": "v1\n"})
    head = git("rev-parse", "HEAD", cwd=checkout)
    (checkout / "version.txt").write_text("v2, not committed\n")
    (checkout / "corral.yaml").write_text("name: dirty\nrun: bash job.sh\n")
    submitted = submit_run(checkout / "corral.yaml")
    [notice] = [n for n in submitted.notices if n.startswith("code: workdir")]
    assert f"from commit {head[:12]} + uncommitted changes" in notice
    run = wait_for_end(submitted.run.id, timeout_s=120)
    assert run.state == "SUCCEEDED", run.reason
    assert "v2, not committed" in CliRunner().invoke(app, ["logs", run.id]).stdout
    status = json.loads(CliRunner().invoke(app, ["status", run.id, "--json"]).stdout)
    assert status["code"]["checkout"] == {"commit": head, "dirty": True}
