"""Helpers for the artifacts tests: raw downloads from the agent and a stand-in runner."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ..helpers import TOKEN


def fetch(url: str, token: str | None = TOKEN) -> tuple[int, bytes, dict[str, str]]:
    """GET ``url``: status, raw body, headers."""
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


class FakeRunner:
    """What the hook reads from the runner: ``status()``, ``started_at`` and ``gang_nodes``."""

    def __init__(self, started_at: float, stages: list[dict[str, Any]] | None = None):
        self.started_at = started_at
        self.stages = stages or []
        self.gang_nodes: list = []

    def status(self) -> dict[str, Any]:
        return {"phase": "finishing", "reason": "", "stages": self.stages}
