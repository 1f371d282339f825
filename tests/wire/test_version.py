"""The wire contract carries a version; a mismatch is a clear error naming both sides."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from agent.helpers import make_plan
from corral.control.agent_client import AgentClient
from corral.errors import AgentError, WireVersionMismatch
from corral.wire import WIRE_VERSION, check_version


def test_check_version_accepts_only_its_own():
    check_version(WIRE_VERSION)
    for other in (WIRE_VERSION + 1, None, str(WIRE_VERSION), True):
        with pytest.raises(WireVersionMismatch):
            check_version(other)


def test_the_error_names_both_versions():
    with pytest.raises(WireVersionMismatch) as info:
        check_version(WIRE_VERSION + 41, who="agent at http://x")
    msg = str(info.value)
    assert f"wire version {WIRE_VERSION + 41}" in msg and f"speaks {WIRE_VERSION}" in msg
    assert "\n" not in msg
    assert info.value.fields["peer_version"] == WIRE_VERSION + 41
    with pytest.raises(WireVersionMismatch) as old:
        check_version(None)
    assert "older than the versioned wire contract" in str(old.value)


class _OldAgent(BaseHTTPRequestHandler):
    """An agent of another corral release: answers with its own wire version (or none)."""

    version: object = None

    def do_GET(self) -> None:
        body: dict[str, object] = {"ready": True}
        if self.path.startswith("/status"):
            body = {"run_id": "r", "attempt": 1, "phase": "running"}
        if self.version is not None:
            body["wire_version"] = self.version
        payload = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        """Quiet: the test reads no server log."""


@pytest.mark.parametrize("version", [None, WIRE_VERSION + 1])
def test_the_controller_refuses_an_agent_of_another_version(version):
    handler = type("H", (_OldAgent,), {"version": version})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = AgentClient(f"http://127.0.0.1:{server.server_address[1]}", "t")
    try:
        for call in (client.ready, client.status):
            with pytest.raises(WireVersionMismatch, match=f"speaks {WIRE_VERSION}"):
                call()
    finally:
        client.close()
        server.shutdown()
        server.server_close()
    assert issubclass(WireVersionMismatch, AgentError)


def test_the_agent_refuses_a_plan_of_another_version(tmp_path):
    plan = make_plan(tmp_path, [{"name": "s", "run": "true"}])
    raw = json.loads(plan.model_dump_json())
    raw["wire_version"] = WIRE_VERSION + 1
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(raw))
    proc = subprocess.run(
        [sys.executable, "-m", "corral.agent", "--plan", str(path)],
        env={"CORRAL_AGENT_TOKEN": "t" * 16, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert f"wire version {WIRE_VERSION + 1}" in line and f"speaks {WIRE_VERSION}" in line
    assert not (tmp_path / "state").exists()  # refused before anything ran


def _unavailable(request: httpx.Request) -> httpx.Response:
    # what a proxy or load balancer in front of a starting (or restarting) agent may say
    return httpx.Response(503, json={"error": "service unavailable"})


def test_a_503_that_is_not_the_agents_is_not_a_version_mismatch():
    client = AgentClient("http://agent.test", "t", client=_mock(_unavailable))
    assert client.ready() is False  # not ready yet, not "another corral release"
    with pytest.raises(AgentError) as info:
        client.status()
    assert not isinstance(info.value, WireVersionMismatch)


def test_an_agent_that_is_not_ready_yet_still_says_its_version():
    def starting(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"ready": False, "wire_version": WIRE_VERSION + 1})

    client = AgentClient("http://agent.test", "t", client=_mock(starting))
    with pytest.raises(WireVersionMismatch):
        client.ready()


def _mock(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_a_probe_s_bare_answer_of_an_agent_that_refuses_the_token_is_not_a_version_mismatch():
    """Another attempt's agent on the address (a node handed over to the next attempt, a port
    used again) answers ``/ready`` without the token as a platform's probe, readiness alone:
    no version, as a corral from before the contract would. ``/status`` tells them apart: its
    401 is a refused token, an AgentError saying so; the run is not failed as "another wire
    version"."""

    def other_attempts_agent(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ready":
            return httpx.Response(200, json={"ready": True})
        return httpx.Response(401, json={"error": "unauthorized"})

    client = AgentClient("http://agent.test", "t", client=_mock(other_attempts_agent))
    with pytest.raises(AgentError, match="rejected the controller's token") as info:
        client.ready()
    assert not isinstance(info.value, WireVersionMismatch)
