"""A graceful stop carries its cause from the controller to the agent and back into the
attempt's outcome (the controller's AgentClient against a real agent)."""

from __future__ import annotations

import time

import httpx
import pytest

from agent.helpers import make_plan
from corral.agent.main import Agent
from corral.control.agent_client import AgentClient
from corral.wire import outcome
from corral.wire.outcome import OutcomeKind, StopCause
from corral.wire.status import Phase

TOKEN = "stop-cause-token-1234"


@pytest.fixture
def agent(tmp_path):
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30"}], grace_seconds=2)
    a = Agent(plan, TOKEN, hooks=[])
    url = a.start()
    client = AgentClient(url, TOKEN)
    yield a, client
    client.close()
    a.close(timeout=10)


def _ended(client: AgentClient):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = client.status()
        if status.terminal:
            return status
        time.sleep(0.05)
    raise AssertionError("the attempt did not end within 20 s of the stop")


def _running(client: AgentClient) -> None:
    deadline = time.monotonic() + 20
    while not client.status().running_stages():
        assert time.monotonic() < deadline, "the stage never started"
        time.sleep(0.05)


def test_a_budget_stop_reaches_the_outcome(agent):
    _, client = agent
    _running(client)
    assert client.stop(StopCause.BUDGET, "budget")["stopping"] is True
    status = _ended(client)
    assert (status.phase, status.stop_cause, status.reason) == (Phase.STOPPED, "budget", "budget")
    result = outcome.from_agent(status)
    assert (result.kind, result.cause) == (OutcomeKind.STOPPED, StopCause.BUDGET)


def test_a_preemption_stop_is_a_preemption_and_the_first_cause_wins(agent):
    _, client = agent
    _running(client)
    client.stop(StopCause.PREEMPTION, "the cloud is taking the machine back")
    client.stop(StopCause.USER, "too late")  # idempotent: the first request is kept
    status = _ended(client)
    assert status.stop_cause == "preemption"
    assert outcome.from_agent(status).kind == OutcomeKind.PREEMPTED


def test_a_stop_without_a_body_is_the_users(agent):
    a, client = agent
    _running(client)
    r = httpx.post(a.url + "/stop", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 202
    assert _ended(client).stop_cause == "user"
    bad = httpx.post(
        a.url + "/stop", headers={"Authorization": f"Bearer {TOKEN}"}, content=b"[1, 2]"
    )
    assert bad.status_code == 400 and "JSON object" in bad.json()["error"]
