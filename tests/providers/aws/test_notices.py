"""The EC2 spot-notice node hook, against a fake IMDSv2 on loopback: token handling,
interruption and rebalance notices, and the graceful stop of a running job inside the notice,
with the hook loaded by the agent from the plan's ``node_hooks`` reference."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corral.agent.events import EventLog
from corral.agent.hooks import load_node_hook
from corral.agent.main import Agent
from corral.errors import BadInput
from corral.providers.aws.notices import (
    ENV_IMDS_URL,
    ENV_NOTICE_INTERVAL,
    Imds,
    ImdsError,
    NoticeHook,
    SpotNoticePoller,
)
from corral.providers.aws.userdata import NOTICE_HOOK
from corral.wire.env import EXIT_PREEMPTED
from corral.wire.node import NodeContext
from corral.wire.plan import AgentPlan
from support.waiting import wait_until

from .fake_imds import FakeImds

TOKEN = "tok-notices-0123456789"

# A job that, like the SDK, saves a checkpoint on SIGTERM and exits "preempted" (75).
JOB = f"""
import os, signal, sys, time
def stop(signum, frame):
    with open(os.path.join(os.environ["CORRAL_CHECKPOINT_DIR"], "ckpt-on-notice"), "w") as f:
        f.write(str(time.time()))
    sys.exit({EXIT_PREEMPTED})
signal.signal(signal.SIGTERM, stop)
open("started", "w").close()
while True:
    time.sleep(0.05)
"""


def test_imds_client_gets_a_token_once_and_renews_it_after_a_401(imds: FakeImds) -> None:
    client = Imds(imds.base_url("i-1"))
    assert client.get("meta-data/instance-id") == "i-1"
    assert client.get("meta-data/instance-life-cycle") == "spot"
    assert client.get_json("meta-data/spot/instance-action") is None  # 404: nothing scheduled
    assert len(imds.paths("PUT")) == 1
    imds.expire_tokens()
    assert client.get("meta-data/instance-id") == "i-1"
    assert len(imds.paths("PUT")) == 2
    assert [s for m, _, s in imds.requests if m == "GET"].count(401) == 1
    assert all(ua.startswith("corral-agent/") for ua in imds.user_agents)
    client.close()


def test_imds_errors_are_imds_errors_not_crashes(imds: FakeImds) -> None:
    client = Imds(imds.base_url("i-1"))
    imds.fail_with = 403
    with pytest.raises(ImdsError, match="HTTP 403"):
        client.get("meta-data/instance-id")
    dead = Imds("http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(ImdsError, match="unreachable"):
        dead.token()


def test_poller_reports_the_interruption_once_and_the_rebalance_without_stopping(
    imds: FakeImds,
) -> None:
    interruptions, rebalances = [], []
    poller = SpotNoticePoller(
        Imds(imds.base_url("i-1")), interruptions.append, rebalances.append, interval=0.01
    )
    poller.check()
    assert poller.lifecycle == "spot" and interruptions == [] and rebalances == []
    imds.rebalance("i-1")
    poller.check()
    assert len(rebalances) == 1 and interruptions == []
    imds.interrupt("i-1", action="terminate", in_s=120)
    poller.check()
    poller.check()
    assert len(interruptions) == 1 and interruptions[0]["action"] == "terminate"
    assert interruptions[0]["time"].endswith("Z") and "noticed_at" in interruptions[0]
    assert len(rebalances) == 1
    st = poller.status()
    assert st["interruption"]["action"] == "terminate" and st["rebalance"]["noticeTime"]
    assert st["error"] is None and st["polls"] == 4


def test_poller_stops_on_an_on_demand_instance(imds: FakeImds) -> None:
    imds.set_lifecycle("i-od", "on-demand")
    poller = SpotNoticePoller(Imds(imds.base_url("i-od")), lambda n: None, interval=0.01)
    poller.start()
    wait_until(lambda: not poller.active, timeout=15, message="the poller to give up")
    poller.close()
    assert not any("instance-action" in p for p in imds.paths("GET"))
    assert poller.status()["polling"] is False


def test_poller_survives_an_unreachable_or_failing_imds_and_recovers(imds: FakeImds) -> None:
    seen = []
    poller = SpotNoticePoller(Imds(imds.base_url("i-1")), seen.append, interval=0.01)
    imds.fail_with = 500
    imds.interrupt("i-1")
    poller.check()
    assert seen == [] and "HTTP 500" in poller.status()["error"]
    imds.fail_with = None
    poller.check()
    assert len(seen) == 1 and poller.status()["error"] is None


def notice_plan(tmp_path: Path, setup: list[str] | None = None) -> AgentPlan:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "job.py").write_text(JOB)
    return AgentPlan(
        run_id="run-n",
        attempt=1,
        workdir=str(work),
        setup=setup or [],
        stages=[{"name": "train", "run": "python job.py"}],
        checkpoint_dir=str(tmp_path / "ckpt"),
        state_dir=str(tmp_path / "state"),
        devices=[],
        grace_seconds=5.0,
        node_hooks=[NOTICE_HOOK],
    )


@pytest.fixture
def imds_env(imds: FakeImds, monkeypatch: pytest.MonkeyPatch) -> FakeImds:
    monkeypatch.setenv(ENV_IMDS_URL, imds.base_url("i-agent"))
    monkeypatch.setenv(ENV_NOTICE_INTERVAL, "0.1")
    return imds


def test_a_spot_notice_stops_the_job_gracefully_with_a_checkpoint(
    tmp_path: Path, imds_env: FakeImds
) -> None:
    plan = notice_plan(tmp_path)
    agent = Agent(plan, TOKEN)
    try:
        agent.start()
        wait_until(
            lambda: (Path(plan.workdir) / "started").exists(),
            timeout=15,
            message="the job to start",
        )
        noticed = time.monotonic()
        imds_env.interrupt("i-agent", in_s=120)
        assert agent.wait(timeout=20), "the attempt did not end after the notice"
        took = time.monotonic() - noticed
        assert took < 10, f"graceful stop took {took:.1f}s, far inside the 120 s notice"
        assert (Path(plan.checkpoint_dir) / "ckpt-on-notice").exists()
        status = agent.runner.status()
        assert status["phase"] == "stopped"
        assert status["stages"][0]["exit_code"] == EXIT_PREEMPTED
        assert "EC2 spot interruption notice: terminate at" in status["reason"]
        assert status["notices"]["interruption"]["action"] == "terminate"
        events, _ = agent.events.after(0)
        stops = [e for e in events if e["type"] == "stop.requested"]
        assert stops and "spot interruption" in stops[0]["data"]["reason"]
    finally:
        agent.close(timeout=10)


def test_a_notice_during_setup_stops_before_the_first_stage(
    tmp_path: Path, imds_env: FakeImds
) -> None:
    imds_env.interrupt("i-agent")
    plan = notice_plan(tmp_path, setup=["sleep 0.5"])
    agent = Agent(plan, TOKEN)
    try:
        agent.start()
        assert agent.wait(timeout=20)
        status = agent.runner.status()
        assert status["phase"] == "stopped"
        assert status["stages"][0]["state"] == "cancelled"
        assert not (Path(plan.workdir) / "started").exists()
    finally:
        agent.close(timeout=10)


def test_an_unknown_hook_or_a_bad_interval_is_bad_input(tmp_path: Path) -> None:
    plan = notice_plan(tmp_path)
    (tmp_path / "state").mkdir()
    events = EventLog(tmp_path / "state" / "events.jsonl")

    def context(**environ: str) -> NodeContext:
        return NodeContext(plan, events, str(tmp_path / "state"), plan.checkpoint_dir, environ)

    with pytest.raises(BadInput, match=r"node hook 'corral\.providers\.gcp\.notices:X' cannot be"):
        load_node_hook("corral.providers.gcp.notices:X", context())
    with pytest.raises(BadInput, match="has no 'Nope'"):
        load_node_hook("corral.providers.aws.notices:Nope", context())
    with pytest.raises(BadInput, match=ENV_NOTICE_INTERVAL):
        load_node_hook(NOTICE_HOOK, context(**{ENV_NOTICE_INTERVAL: "soon"}))
    hook = load_node_hook(NOTICE_HOOK, context(**{ENV_IMDS_URL: "http://127.0.0.1:9"}))
    assert isinstance(hook, NoticeHook)
    hook.close()
    events.close()
