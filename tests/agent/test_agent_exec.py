"""``POST /exec``, ``GET /exec/<id>``, ``POST /exec/<id>/kill``: a command on the node, in the
job's workdir and environment, its output read back in whole lines with the job's secrets
masked, and its exit code (124 past its timeout, 128+N for a signal); bounded and
token-protected like every endpoint. The controller's client speaks it."""

from __future__ import annotations

import pytest

from corral.agent import execs
from corral.control.agent_client import AgentClient
from corral.errors import AgentError
from corral.wire.env import ENV_SECRET_NAMES
from support.waiting import wait_until

from .helpers import TOKEN, make_plan

SECRET = "s3cr3t-value-0123456789"


@pytest.fixture
def agent(tmp_path, start_agent, monkeypatch):
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "sleep 30"}],
        env={"GREETING": "hello"},
    )
    environ = {"PATH": "/usr/bin:/bin", "MY_SECRET": SECRET, ENV_SECRET_NAMES: "MY_SECRET"}
    client = start_agent(plan, environ=environ)
    (tmp_path / "work" / "here.txt").write_text("in the workdir\n")
    return AgentClient(client.url, TOKEN, timeout=10)


def run(agent: AgentClient, argv: list[str], timeout_s: float | None = None) -> dict:
    cid = agent.exec_start(argv, timeout_s)
    out, offset, last = [], 0, {}

    def done() -> bool:
        nonlocal offset, last
        last = agent.exec_read(cid, offset)
        out.append(last["data"])
        offset = last["next_offset"]
        return bool(last["done"])

    wait_until(done, 20, 0.05, "the command to end")
    return {**last, "output": "".join(out), "id": cid}


def test_a_command_runs_in_the_workdir_with_the_jobs_env_and_secrets_masked(agent):
    got = run(agent, ["sh", "-c", 'cat here.txt; echo "$GREETING $MY_SECRET"; exit 3'])
    assert got["output"] == "in the workdir\nhello ***\n"
    assert (got["exit_code"], got["timed_out"]) == (3, False)
    assert SECRET not in got["output"]
    env = run(agent, ["env"])["output"]
    assert "CORRAL_AGENT_TOKEN" not in env and TOKEN not in env and "CORRAL_RUN_ID=run-1" in env


def test_a_timeout_is_124_and_a_signal_is_128_plus_it(agent):
    assert run(agent, ["sleep", "30"], timeout_s=0.3)["exit_code"] == execs.TIMED_OUT
    got = run(agent, ["sh", "-c", "kill -9 $$"])
    assert got["exit_code"] == 128 + 9


def test_a_command_can_be_killed_and_long_output_comes_in_whole_lines(agent):
    cid = agent.exec_start(["sh", "-c", "seq 1 20000; sleep 30"])
    # killed in its sleep, once all of seq's output is in (killed while seq still wrote, as
    # on a loaded machine, the output would rightly stop short)
    size = sum(len(str(n)) + 1 for n in range(1, 20001))

    def received() -> int:  # bytes of output so far, page by page
        offset = 0
        while (page := agent.exec_read(cid, offset))["next_offset"] > offset:
            offset = page["next_offset"]
        return offset

    wait_until(lambda: received() >= size, 30, 0.05, "the output")
    agent.exec_kill(cid)
    out, offset = [], 0
    while True:
        page = agent.exec_read(cid, offset)
        out.append(page["data"])
        offset = page["next_offset"]
        if page["done"]:
            break
    assert "".join(out).split() == [str(n) for n in range(1, 20001)]
    assert page["exit_code"] == 128 + 15


def test_bad_requests_are_one_line_refusals(agent, tmp_path):
    with pytest.raises(AgentError, match="argv must be a non-empty list"):
        agent.exec_start([])
    with pytest.raises(AgentError, match="cannot run 'no-such-binary-xyz'"):
        agent.exec_start(["no-such-binary-xyz"])
    with pytest.raises(AgentError, match="timeout_s must be above 0"):
        agent.exec_start(["true"], timeout_s=-1)
    with pytest.raises(AgentError, match="no command 'nope'"):
        agent.exec_read("nope")
    with pytest.raises(AgentError, match="rejected the controller's token"):
        AgentClient(agent.endpoint, "wrong").exec_start(["true"])
    started = [agent.exec_start(["sleep", "30"]) for _ in range(execs.MAX_RUNNING)]
    with pytest.raises(AgentError, match="commands already run"):
        agent.exec_start(["true"])
    for cid in started:
        agent.exec_kill(cid)
