"""The agent rings the controller's bell (``agent.bell``) once what it announces can be seen:
a controller that looks the moment its bell rings finds the change in ``GET /status``, so it
never takes the ring for nothing and waits out its quiet pace (``Settings.quiet_poll_s``, 30 s
by default) for a change it was rung for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral.agent.main import Agent
from corral.wire.plan import AgentPlan

from .helpers import TOKEN, make_plan


def _rings_seen(agent: Agent) -> list[tuple[str, str, bool]]:
    """(event, the phase GET /status answers, whether it is terminal) at each ring (the
    listeners are told as the bell is)."""
    seen: list[tuple[str, str, bool]] = []

    def look(event: dict[str, Any]) -> None:
        status = agent.api.status()
        seen.append((event["type"], status.phase.value, status.terminal))

    agent.events.listeners.append(look)
    return seen


def _run(plan: AgentPlan, *, stop: bool = False) -> list[tuple[str, str, bool]]:
    agent = Agent(plan, TOKEN)
    seen = _rings_seen(agent)
    agent.start()
    try:
        if stop:
            agent.stop("agent received SIGTERM")  # a preemption's notice
        assert agent.wait(30), "the attempt never ended"
    finally:
        agent.close(timeout=10)
    return seen


def test_the_end_of_an_attempt_is_rung_once_the_status_says_it_ended(tmp_path: Path) -> None:
    seen = _run(make_plan(tmp_path, [{"name": "train", "run": "true"}]))
    ended = [s for s in seen if s[0] == "attempt.finished"]
    assert ended == [("attempt.finished", "succeeded", True)], seen


def test_a_stopped_attempt_s_end_is_rung_once_the_status_says_it_stopped(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30"}])
    seen = _run(plan, stop=True)
    ended = [s for s in seen if s[0] == "attempt.finished"]
    assert ended == [("attempt.finished", "stopped", True)], seen
