"""A worker's warm agent (``corral.queue.runner.WarmAgent``): started before its attempt, it
runs the attempt as a fresh agent would (the attempt's environment, directory, output); an
attempt it cannot take gets a fresh agent as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.helpers import TOKEN, make_plan
from corral.agent.warm import take_order
from corral.queue.runner import AgentProcess, Bootstrap, WarmAgent
from support.waiting import wait_until


def _attempt(tmp_path: Path, env: dict[str, str]) -> AgentProcess:
    stage = {"name": "main", "run": 'echo "$GREETING from $(pwd) pid $PPID" > said.txt'}
    plan = make_plan(tmp_path, [stage], controller_timeout_s=0.1)
    agent = AgentProcess(
        tmp_path / "attempt",
        Bootstrap(plan=plan, token=TOKEN, env=env),
        gpus=[],
        bind_host="127.0.0.1",
        advertise_host="127.0.0.1",
    )
    agent.dir.mkdir()
    return agent


def _ended(agent: AgentProcess) -> int:
    wait_until(lambda: agent.exit_code() is not None, 60, 0.05, "the agent to exit")
    code = agent.exit_code()
    assert code is not None
    return code


def test_an_attempt_runs_in_the_agent_started_before_it(tmp_path: Path) -> None:
    warm = WarmAgent(tmp_path / "slot" / "warm-agent.out")
    warm.start()
    assert warm.proc is not None
    waiting = warm.proc.pid
    agent = _attempt(tmp_path, {"GREETING": "hello"})

    assert agent.start(warm) == waiting  # no new process: the one that waited runs it
    assert agent.warm and warm.proc is None  # used once
    assert _ended(agent) == 0, (agent.dir / "agent.out").read_text()
    said = (tmp_path / "work" / "said.txt").read_text().split()
    assert said[:3] == ["hello", "from", str(tmp_path / "work")]  # its env, its workdir
    assert "serving on" in (agent.dir / "agent.out").read_text()  # its output, there
    assert agent.endpoint() is not None
    assert (tmp_path / "slot" / "warm-agent.out").read_text() == ""


def test_an_attempt_that_needs_another_python_start_gets_a_fresh_agent(tmp_path: Path) -> None:
    warm = WarmAgent(tmp_path / "slot" / "warm-agent.out")
    warm.start()
    assert warm.proc is not None
    waiting = warm.proc
    path = os.environ.get("PYTHONPATH", "")
    agent = _attempt(tmp_path, {"GREETING": "hi", "PYTHONPATH": f"{path}:{tmp_path}"})

    pid = agent.start(warm)
    assert pid != waiting.pid and not agent.warm
    assert waiting.poll() is not None  # the unused one is gone, not left waiting
    assert _ended(agent) == 0, (agent.dir / "agent.out").read_text()
    assert (tmp_path / "work" / "said.txt").read_text().startswith("hi from")


def test_a_warm_agent_that_died_is_replaced_by_a_fresh_one(tmp_path: Path) -> None:
    warm = WarmAgent(tmp_path / "slot" / "warm-agent.out", python="/nonexistent/python")
    warm.start()  # cannot start: no error, no warm agent
    assert warm.proc is None
    agent = _attempt(tmp_path, {"GREETING": "hey"})
    agent.start(warm)
    assert not agent.warm
    assert _ended(agent) == 0, (agent.dir / "agent.out").read_text()


@pytest.mark.parametrize(
    ("order", "why"),
    [
        ([], "a JSON object expected"),
        ({"argv": "--plan p", "env": {}, "cwd": "/", "out": "o"}, "argv: a list"),
        ({"argv": [], "env": {"A": 1}, "cwd": "/", "out": "o"}, "env: a mapping"),
        ({"argv": [], "env": {}, "cwd": None, "out": "o"}, "cwd and out"),
    ],
)
def test_a_bad_order_is_refused_before_anything_changes(order: object, why: str) -> None:
    cwd = os.getcwd()
    with pytest.raises(ValueError, match=why):
        take_order(order)
    assert os.getcwd() == cwd
