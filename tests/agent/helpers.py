"""Helpers for the agent tests: build a plan and call an agent's API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from corral.agent.main import Agent
from corral.wire.plan import AgentPlan
from support.waiting import wait_until

TOKEN = "tok-3f9a1c77e2b54d0d"


def make_plan(tmp_path: Path, stages: list[dict[str, Any]], **fields: Any) -> AgentPlan:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    values: dict[str, Any] = {
        "run_id": "run-1",
        "attempt": 1,
        "workdir": str(work),
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "state_dir": str(tmp_path / "state"),
        "devices": [],
        "grace_seconds": 0.5,
        "stages": stages,
    }
    values.update(fields)
    return AgentPlan.model_validate(values)


class Client:
    def __init__(self, url: str, token: str | None = TOKEN, agent: Agent | None = None):
        self.url = url
        self.token = token
        self.agent = agent

    def request(
        self, method: str, path: str, token: str | None = ..., raw: bool = False
    ) -> tuple[int, Any]:
        token = self.token if token is ... else token
        req = urllib.request.Request(
            self.url + path, method=method, data=b"" if method == "POST" else None
        )
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        return status, (body.decode() if raw else json.loads(body))

    def get(self, path: str, **kw: Any) -> Any:
        status, body = self.request("GET", path, **kw)
        assert status == 200, (path, status, body)
        return body

    def post(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, **kw)

    def wait_until(self, predicate, timeout: float = 15.0) -> dict:
        """Poll /status until ``predicate(status)`` holds; returns that status."""
        last: list[dict] = []

        def holds() -> dict | None:
            last[:] = [self.get("/status")]
            return last[0] if predicate(last[0]) else None

        return wait_until(holds, timeout, message=lambda: f"the agent's status; last: {last[0]}")

    def wait_finished(self, timeout: float = 15.0) -> dict:
        return self.wait_until(lambda s: s["finished_at"] is not None, timeout)

    def stage(self, status: dict, name: str) -> dict:
        return next(s for s in status["stages"] if s["name"] == name)

    def events(self) -> list[dict]:
        return self.get("/events")["events"]
