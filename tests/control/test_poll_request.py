"""One look at a RUNNING run is one request to its agent (``GET /poll``): the status, the new
events and the new log bytes arrive together and are copied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.agent.main import Agent
from corral.control import agent_client
from corral.control.agent_client import AgentClient
from corral.control.controller import reconcile
from corral.store.states import RunState
from corral.wire.plan import AgentPlan
from support.waiting import wait_until

from .unitkit import Rig, rig

TOKEN = "tok-poll-0123456789"


@pytest.fixture
def live_agent(tmp_path: Path) -> Iterator[tuple[Agent, str]]:
    work = tmp_path / "work"
    work.mkdir()
    plan = AgentPlan.model_validate(
        {
            "run_id": "unit",
            "attempt": 1,
            "workdir": str(work),
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "state_dir": str(tmp_path / "state"),
            "devices": [],
            "grace_seconds": 0.5,
            "stages": [
                {"name": "train", "run": "echo one; echo two; sleep 30"},
            ],
        }
    )
    agent = Agent(plan, TOKEN)
    url = agent.start()
    yield agent, url
    agent.close(timeout=10)


def _rig_on(tmp_path: Path, url: str, paths: list[str], monkeypatch: Any) -> Rig:
    (tmp_path / "ctl").mkdir()
    r = rig(tmp_path / "ctl", RunState.RUNNING)
    real = AgentClient._fetch

    def counted(self: AgentClient, method: str, path: str, **kw: Any) -> tuple[int, bytes]:
        paths.append(path)
        return real(self, method, path, **kw)

    monkeypatch.setattr(agent_client.AgentClient, "_fetch", counted)
    r.ctx.client_factory = lambda endpoint, token: AgentClient(url, TOKEN)
    return r


def test_one_look_at_a_running_run_is_one_request(tmp_path, live_agent, monkeypatch):
    agent, url = live_agent
    log_file = Path(agent.plan.state_dir) / "logs" / "train.log"
    wait_until(lambda: "two" in (log_file.read_text() if log_file.exists() else ""), 15)
    paths: list[str] = []
    r = _rig_on(tmp_path, url, paths, monkeypatch)

    reconcile(r.ctx, r.run())
    assert paths == ["/poll"]
    copied = Path(r.ctx.home) / "runs" / r.run_id / "logs" / "a1" / "train.log"
    assert copied.read_text() == log_file.read_text()
    types = [e.type for e in r.store.events(r.run_id)]
    assert "stage.started" in types
    assert r.store.get_attempt(r.run_id, 1).data["status"]["phase"] == "running"
    events = len(r.store.events(r.run_id))

    paths.clear()
    for _ in range(3):
        r.clock.advance(1)
        reconcile(r.ctx, r.run())
    assert paths == ["/poll"] * 3  # the provider is asked every 5 s, the agent once a look
    assert copied.read_text() == log_file.read_text()  # nothing copied twice
    assert len(r.store.events(r.run_id)) == events


def test_a_restarted_controller_goes_on_from_the_stored_cursor_and_offsets(
    tmp_path, live_agent, monkeypatch
):
    agent, url = live_agent
    log_file = Path(agent.plan.state_dir) / "logs" / "train.log"
    wait_until(lambda: "two" in (log_file.read_text() if log_file.exists() else ""), 15)
    paths: list[str] = []
    r = _rig_on(tmp_path, url, paths, monkeypatch)
    reconcile(r.ctx, r.run())
    events = len(r.store.events(r.run_id))
    r.ctx.polls.clear()  # what a new controller process starts with
    r.ctx.forget(r.run_id)
    reconcile(r.ctx, r.run())
    copied = Path(r.ctx.home) / "runs" / r.run_id / "logs" / "a1" / "train.log"
    assert copied.read_text() == log_file.read_text()
    assert len(r.store.events(r.run_id)) == events
