"""The agent's answers are wire models on both sides: the agent (and the stand-in) build them,
the controller's client validates each answer once and refuses a key the contract lacks."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from corral.control.agent_client import AgentClient
from corral.errors import AgentError
from corral.testing.standin import Config, StandInServer
from corral.wire import WIRE_VERSION
from corral.wire.events import AgentEvent, EventsPage
from corral.wire.poll import PollAnswer, StageLogChunk
from corral.wire.status import AgentStatus, CodeStatus

TS = "2026-01-01T00:00:00.000Z"
STATUS = {"wire_version": WIRE_VERSION, "run_id": "r", "attempt": 1, "phase": "running"}


def _client(answers: dict[str, dict]) -> AgentClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers[request.url.path])

    http = httpx.Client(transport=httpx.MockTransport(handler))
    return AgentClient("http://agent.test", "tok", client=http)


def test_a_poll_answer_carries_typed_events() -> None:
    event = {"seq": 1, "ts": TS, "type": "stage.started", "stage": "a", "data": {"gpus": []}}
    poll = {"wire_version": WIRE_VERSION, "status": STATUS, "events": [event], "events_next": 1}
    answer = _client({"/poll": poll}).poll(0, {})
    assert answer.events == [AgentEvent.model_validate(event)]
    assert answer.events[0].stage == "a" and answer.events[0].seq == 1


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/status", {**STATUS, "checkpoint_syncc": {}}, "checkpoint_syncc"),
        ("/poll", {"wire_version": WIRE_VERSION, "status": STATUS, "extra": 1}, "extra"),
        (
            "/poll",
            {
                "wire_version": WIRE_VERSION,
                "status": STATUS,
                "events": [{"seq": 1, "ts": TS, "type": "progress", "colour": "red"}],
            },
            "events.0.colour",
        ),
    ],
)
def test_an_unknown_key_in_an_agent_answer_is_refused_naming_it(
    path: str, body: dict, where: str
) -> None:
    client = _client({path: body})
    with pytest.raises(AgentError) as err:
        client.status() if path == "/status" else client.poll(0, {})
    assert f"({where}: Extra inputs are not permitted)" in err.value.message


def test_hook_sections_are_typed_fields_of_the_status() -> None:
    code = {"state": "waiting", "source": "upload", "sha256": "ab" * 32, "size": 9, "received": 4}
    status = _client({"/status": {**STATUS, "code": code}}).status()
    assert status.code == CodeStatus.model_validate(code) and status.code.received == 4
    assert status.checkpoint_sync is None and status.notices is None
    # a section that is not there stays out of the JSON, as the agent left it out
    assert "checkpoint_sync" not in status.as_dict() and status.as_dict()["code"] == code


def test_the_stand_ins_answers_validate_as_the_agents_models() -> None:
    srv = StandInServer(cfg=Config(boot_s=0.0, log_every_s=0.01, progress_every_s=0.01))
    srv.serve_in_thread()
    try:
        base = srv.clock()
        srv.launch({"key": "k", "run_id": "r", "attempt": 1, "token": "tok", "run_s": 0.05})
        srv.clock = lambda: base + 1.0  # the job (0.05 s) is over
        headers = {"Authorization": "Bearer tok"}
        with httpx.Client(base_url=f"{srv.url}/a/k", headers=headers) as http:
            poll = PollAnswer.model_validate(http.get("/poll").json())
            status = AgentStatus.model_validate(http.get("/status").json())
            page = EventsPage.model_validate(http.get("/events").json())
            chunk = StageLogChunk.model_validate(http.get("/logs?stage=main").json())
        assert poll.status == status and status.phase == "succeeded"
        assert poll.events == page.events and page.events[-1].type == "attempt.finished"
        assert [e.seq for e in page.events] == list(range(1, len(page.events) + 1))
        assert chunk.data == poll.logs["main"].data and chunk.data.startswith(TS)
    finally:
        srv.shutdown()
        srv.server_close()


HOOK_MODULE = """
class Hook:
    name = "stray"

    def __init__(self, context):
        pass

    def before_stages(self, runner):
        return None

    def after_stages(self, runner, phase):
        return None

    def status(self):
        return {"notices": {"polls": 3}, "stray": {"x": 1}}

    def close(self):
        pass
"""


def test_a_hook_section_the_status_model_lacks_is_left_out_of_the_agents_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.agent.main import Agent
    from corral.wire.plan import AgentPlan
    from corral.wire.status import HOOK_SECTIONS

    assert set(AgentStatus.model_fields) >= HOOK_SECTIONS
    (tmp_path / "stray_hook.py").write_text(HOOK_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "work").mkdir()
    plan = AgentPlan(
        run_id="r",
        attempt=1,
        workdir=str(tmp_path / "work"),
        stages=[{"name": "a", "run": "true"}],
        checkpoint_dir=str(tmp_path / "ckpt"),
        state_dir=str(tmp_path / "state"),
        devices=[],
        node_hooks=["stray_hook:Hook"],
    )
    agent = Agent(plan, "tok-0123456789")
    try:
        agent.start()
        assert agent.wait(timeout=20)
        raw = agent.runner.status()
        assert raw["notices"] == {"polls": 3} and "stray" not in raw
        assert AgentStatus.model_validate(raw).notices == {"polls": 3}
    finally:
        agent.close(timeout=10)
