"""Fixtures for the agent tests: an agent running in this process."""

from __future__ import annotations

from typing import Any

import pytest

from corral.agent.main import Agent
from corral.wire.plan import AgentPlan

from .helpers import TOKEN, Client


@pytest.fixture
def start_agent():
    """``start_agent(plan, **agent_kwargs) -> Client`` for an agent running in this process."""
    agents: list[Agent] = []

    def start(plan: AgentPlan, token: str = TOKEN, **kw: Any) -> Client:
        agent = Agent(plan, token, **kw)
        agents.append(agent)
        return Client(agent.start(), token, agent)

    yield start
    for agent in agents:
        agent.close(timeout=10)
