"""The agent binds its address before the job starts and builds its HTTP server while the job
starts: a taken port runs nothing; the job's start waits for no HTTP module."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest

from corral.agent.listen import listen
from corral.agent.main import Agent

from .helpers import TOKEN, Client, make_plan


def test_a_listener_on_port_zero_gets_a_port_and_accepts():
    sock = listen("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = sock.accept()
            conn.close()
    finally:
        sock.close()


def test_a_port_that_is_taken_fails_the_start_and_runs_nothing(tmp_path):
    taken = listen("127.0.0.1", 0)
    port = taken.getsockname()[1]
    marker = tmp_path / "ran"
    plan = make_plan(
        tmp_path, [{"name": "train", "run": f"touch {marker}"}], host="127.0.0.1", port=port
    )
    agent = Agent(plan, TOKEN)
    try:
        with pytest.raises(OSError):
            agent.start()
        assert not (tmp_path / "state" / "agent.json").exists()
        assert not agent.runner.finished.wait(0.5) and not marker.exists()  # never started
    finally:
        taken.close()
        agent.close(timeout=0.1)
    assert not marker.exists()


def test_the_server_answers_on_the_socket_bound_before_the_job(tmp_path):
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30"}])
    agent = Agent(plan, TOKEN)
    try:
        url = agent.start()
        written = json.loads((tmp_path / "state" / "agent.json").read_text())
        assert written["url"] == url and written["port"] == agent.server.port
        assert Client(url).get("/health")["ok"] is True
    finally:
        agent.close(timeout=10)


def test_the_job_starts_before_the_http_server_is_imported(tmp_path):
    """The first line of user code waits for no HTTP module (``benchmarks/launch_overhead.py``):
    the agent's process has not imported its server when the runner starts the job."""
    plan = make_plan(tmp_path, [{"name": "train", "run": "true"}])
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.model_dump_json())
    script = textwrap.dedent(
        f"""
        import sys
        from corral.agent import main, runner
        from corral.wire.plan import AgentPlan

        seen = []
        real = runner.Runner.start

        def start(self):
            seen.append("corral.agent.server" in sys.modules)
            real(self)

        runner.Runner.start = start
        agent = main.Agent(AgentPlan.load({str(plan_file)!r}), {TOKEN!r})
        agent.start()
        agent.wait(30)
        agent.close(timeout=10)
        print(seen, "corral.agent.server" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["[False]", "True"], out.stderr
