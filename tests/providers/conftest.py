"""Fixtures for the provider tests: the agent command the local provider starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REAL_AGENT = Path(__file__).resolve().parents[2] / "src" / "corral" / "agent" / "__main__.py"


@pytest.fixture(scope="session")
def agent_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The ``python`` the local provider runs ``-m corral.agent`` with: the real interpreter
    once the real agent exists, else a wrapper that runs the test stand-in agent."""
    if REAL_AGENT.exists():
        return sys.executable
    standin = Path(__file__).with_name("standin_agent.py")
    wrapper = tmp_path_factory.mktemp("agent-python") / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{standin}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)
