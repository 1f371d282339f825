"""docs/walkthrough-ionet.md on the fake IO.net, through the CLI: the quickstart language model
trained on one GPU container, checkpoints and results in the bucket, then served from the
container's single traffic port (the agent's) until `corral stop`, which ends the run
SUCCEEDED and terminates the deployment."""

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
from examples.helpers import TINY
from support.waiting import wait_until

from .fake_server import API_KEY

pytestmark = [pytest.mark.slow, pytest.mark.torch]
QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"


def test_the_ionet_walkthrough_trains_serves_and_cleans_up(fake, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    for name, value in {
        **fake.env(),
        "IONET_API_KEY": API_KEY,
        "CORRAL_PROVIDERS": "ionet",
        "CORRAL_IONET_LIST_CACHE_S": "0.3",
        "CORRAL_IONET_CONTAINERS_CACHE_S": "0.3",
        "CORRAL_IONET_RATE_PER_S": "none",
        # the R2 key pair the spec names as secrets (a file:// bucket here needs none)
        "AWS_ACCESS_KEY_ID": "r2-key-id-for-the-test",
        "AWS_SECRET_ACCESS_KEY": "r2-secret-for-the-test",
    }.items():
        monkeypatch.setenv(name, value)
    work = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, work, ignore=shutil.ignore_patterns("out", "checkpoints"))
    bucket = tmp_path / "bucket"
    args = ["launch", str(work / "ionet.yaml"), "--detach", "--json"]
    for item in [f"env.{k}={v}" for k, v in TINY.items()] + [
        "env.QUICKSTART_STEPS=30",
        "env.QUICKSTART_EVAL_EVERY=10",
        "resources.gpus=H100:1",
        "eval.acceptance=[val_loss <= 10]",  # 30 tiny steps: far from the example's 3.0
        f"checkpoints.storage=file://{bucket}",
        f"artifacts.storage=file://{bucket}",
    ]:
        args += ["--set", item]
    cli = CliRunner()
    launched = cli.invoke(app, args)
    assert launched.exit_code == 0, launched.output
    run_id = json.loads(launched.stdout)["id"]

    def serving():
        run = get_run(run_id)
        assert run.state not in ("FAILED", "CANCELLED", "STOPPED"), run.reason
        svc = (run.services or [None])[0]
        return run if svc and svc.get("healthy") and svc.get("url") else None

    run = wait_until(serving, timeout=180, interval=0.5, message="the model served")
    url = run.services[0]["url"]
    assert url.startswith(f"{fake.base_url}/proxy/")  # the container's public URL
    answer = httpx.get(url + "generate", params={"prompt": "The ", "chars": 40}, timeout=30)
    assert answer.status_code == 200 and answer.json()["text"].startswith("The ")
    posted = httpx.post(url + "generate", json={"prompt": "A", "chars": 5}, timeout=30)
    assert posted.status_code == 200 and len(posted.json()["text"]) == 6
    stopped = cli.invoke(app, ["stop", run_id, "--wait"])
    assert stopped.exit_code == 0, stopped.output
    assert Store.open().get_run(run_id).state == "SUCCEEDED"
    assert get_run(run_id).acceptance["all_pass"] is True  # judged when the attempt ends
    assert (bucket / run_id / "artifacts" / "out" / "eval_report.json").is_file()
    assert [p.name for p in (bucket / run_id).iterdir() if p.name.startswith("ckpt-")]
    wait_until(
        lambda: all(d.status in ("termination requested", "destroyed") for d in fake.live()),
        timeout=30,
        message="the deployment terminated",
    )
