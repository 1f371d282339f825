"""Service stages in the agent: forwarded through /services/<stage>/ (public, or behind the
token), their health in /status, and how a stop ends the attempt (succeeded only when every
other stage is done)."""

from __future__ import annotations

import socket
import sys

import httpx

from .helpers import TOKEN, make_plan


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(port: int) -> str:
    return f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1"


def test_services_are_forwarded_with_health_and_a_stop_after_training_succeeds(
    tmp_path, start_agent
):
    pub, priv = _port(), _port()
    plan = make_plan(
        tmp_path,
        [
            {"name": "train", "run": "echo done > out.txt"},
            {
                "name": "web",
                "run": _server(pub),
                "needs": ["train"],
                "service": {"ports": [pub], "health": "/out.txt"},
            },
            {
                "name": "admin",
                "run": _server(priv),
                "service": {"ports": [priv], "health": "/missing", "public": False},
            },
        ],
    )
    client = start_agent(plan)
    status = client.wait_until(
        lambda s: (
            {x["stage"]: x["healthy"] for x in s.get("services", [])}
            == {"web": True, "admin": False}
        )
    )
    assert status["phase"] == "running"
    assert {s["name"]: s["state"] for s in status["stages"]}["train"] == "succeeded"
    base = client.url
    assert httpx.get(f"{base}/services/web/out.txt").text.strip() == "done"
    assert httpx.get(f"{base}/services/web:{pub}/out.txt").status_code == 200
    assert httpx.get(f"{base}/services/web:1/out.txt").status_code == 404  # not its port
    assert httpx.get(f"{base}/services/nope/").status_code == 404
    assert httpx.get(f"{base}/services/admin/").status_code == 401  # not public
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{base}/services/admin/", headers=auth).status_code == 200
    assert httpx.post(f"{base}/services/web/out.txt", content=b"x").status_code == 501  # the app's
    client.post("/stop")
    final = client.wait_finished()
    assert final["phase"] == "succeeded" and final["reason"].startswith("services stopped")
    assert httpx.get(f"{base}/services/web/out.txt").status_code == 503


def test_a_stop_before_training_is_done_is_a_stop(tmp_path, start_agent):
    port = _port()
    plan = make_plan(
        tmp_path,
        [
            {"name": "train", "run": "sleep 30"},
            {"name": "web", "run": _server(port), "service": {"ports": [port]}},
        ],
    )
    client = start_agent(plan)
    client.wait_until(lambda s: all(st["state"] == "running" for st in s["stages"]))
    client.post("/stop")
    assert client.wait_finished()["phase"] == "stopped"
