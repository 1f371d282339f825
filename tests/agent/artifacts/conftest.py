"""Fixtures for the artifacts tests: the in-process agent of the agent tests."""

from __future__ import annotations

from agent.conftest import start_agent

__all__ = ["start_agent"]
