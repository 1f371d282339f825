"""docs/walkthrough-salad.md on the fake SaladCloud, through the CLI: the 8-GPU pipeline
(two models on four GPUs each, a CPU stage, an evaluation with acceptance criteria) on one
container group, its results served through the container gateway until `corral stop`, the
artifacts in the bucket, and no group left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.service.details import get_run
from corral.store import Store
from support.waiting import wait_until

from .fake_server import API_KEY

pytestmark = [pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "pipeline"


def test_the_salad_walkthrough_runs_serves_and_cleans_up(fake, tmp_path, monkeypatch):
    for name, value in {
        **fake.env(),
        "SALAD_API_KEY": API_KEY,
        "CORRAL_PROVIDERS": "salad",
        "CORRAL_SALAD_LIST_CACHE_S": "0.3",
        "CORRAL_SALAD_INSTANCES_CACHE_S": "0.3",
    }.items():
        monkeypatch.setenv(name, value)
    work = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("out"))
    bucket = tmp_path / "bucket"
    cli = CliRunner()
    offers = cli.invoke(app, ["offers", "--gpus", "L40S:8", "--provider", "salad", "--json"])
    assert offers.exit_code == 0, offers.output
    launched = cli.invoke(
        app,
        [
            "launch",
            str(work / "salad.yaml"),
            "--set",
            "env.PIPELINE_SECONDS=1",
            "--set",
            f"artifacts.storage=file://{bucket}",
            "--detach",
            "--json",
        ],
    )
    assert launched.exit_code == 0, launched.output
    run_id = json.loads(launched.stdout)["id"]

    def serving():
        run = get_run(run_id)
        assert run.state not in ("FAILED", "CANCELLED", "STOPPED"), run.reason
        svc = (run.services or [None])[0]
        return run if svc and svc.get("healthy") and svc.get("url") else None

    run = wait_until(serving, timeout=90, interval=0.3, message="the results service")
    url = run.services[0]["url"]
    assert "/gw/corral-" in url  # through the container gateway
    report = httpx.get(url + "report.json").json()
    assert report["stages_ok"] >= 3 and report["gpus_used"] >= 8
    text = cli.invoke(app, ["status", run_id]).output
    assert f"results: {url}" in text
    stopped = cli.invoke(app, ["stop", run_id, "--wait"])
    assert stopped.exit_code == 0, stopped.output
    final = Store.open().get_run(run_id)
    assert final.state == "SUCCEEDED", final.reason
    assert get_run(run_id).acceptance["all_pass"] is True  # every criterion passed
    manifest = json.loads((bucket / run_id / "manifest.json").read_text())
    assert any(path.endswith("report.json") for path in manifest["files"])
    wait_until(lambda: not fake.cloud.groups, timeout=30, message="the group deleted")
