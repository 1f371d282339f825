"""A fake EC2 instance metadata service (IMDSv2) on loopback, for many instances at once.

Each instance is served under its own prefix: ``<url>/<instance id>/latest/...`` (``<url>/latest``
is instance ``default``). It follows the contract in ``shared/providers/aws.md`` section 8:

* ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds`` in 1..21600 (else
  400) and returns a random token; a PUT to a versioned path (``/2021-03-23/api/token``) is 403;
* every ``GET /latest/meta-data/...`` needs a live ``X-aws-ec2-metadata-token`` (else 401);
* ``spot/instance-action`` is 404 until :meth:`FakeImds.interrupt`, then
  ``{"action": ..., "time": "<now + in_s, ISO-8601 Z>"}``; ``spot/termination-time`` likewise;
* ``events/recommendations/rebalance`` is 404 until :meth:`FakeImds.rebalance`;
* ``instance-life-cycle`` is ``spot`` (or what :meth:`FakeImds.set_lifecycle` says),
  ``instance-id`` the instance id.

Control (for :class:`~corral.testing.aws.LocalMachineRunner`):
``GET /_fake/<instance id>`` answers ``{"interruption": ..., "rebalance": ..., "lifecycle": ...}``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeImds:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.tokens: dict[str, float] = {}
        self.instances: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self.user_agents: set[str] = set()
        self.fail_with: int | None = None  # answer every metadata request with this status
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_PUT(self) -> None:
                imds._handle(self, "PUT")

            def do_GET(self) -> None:
                imds._handle(self, "GET")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    # --- what tests do ----------------------------------------------------------------------

    def base_url(self, instance_id: str) -> str:
        return f"{self.url}/{instance_id}"

    def _instance(self, instance_id: str) -> dict[str, Any]:
        return self.instances.setdefault(
            instance_id, {"lifecycle": "spot", "interruption": None, "rebalance": None}
        )

    def interrupt(self, instance_id: str, action: str = "terminate", in_s: float = 120.0) -> None:
        with self._lock:
            self._instance(instance_id)["interruption"] = {
                "action": action,
                "time": _iso(self.clock() + in_s),
            }

    def rebalance(self, instance_id: str) -> None:
        with self._lock:
            self._instance(instance_id)["rebalance"] = {"noticeTime": _iso(self.clock())}

    def set_lifecycle(self, instance_id: str, lifecycle: str) -> None:
        with self._lock:
            self._instance(instance_id)["lifecycle"] = lifecycle

    def expire_tokens(self) -> None:
        with self._lock:
            self.tokens.clear()

    def paths(self, method: str = "GET") -> list[str]:
        with self._lock:
            return [p for m, p, _ in self.requests if m == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- the service ------------------------------------------------------------------------

    def _reply(
        self, h: BaseHTTPRequestHandler, status: int, body: str = "", ctype: str = "text/plain"
    ) -> None:
        data = body.encode()
        # recorded before the answer goes out: a client that has its answer may look at once
        with self._lock:
            self.requests.append((h.command, h.path, status))
            self.user_agents.add(h.headers.get("User-Agent", ""))
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = [p for p in h.path.split("?")[0].split("/") if p]
        if parts[:1] == ["_fake"] and len(parts) == 2 and method == "GET":
            with self._lock:
                state = dict(self._instance(parts[1]))
            return self._reply(h, 200, json.dumps(state), "application/json")
        if parts and parts[0] != "latest" and not parts[0][:1].isdigit():
            instance_id, parts = parts[0], parts[1:]
        else:
            instance_id = "default"
        if not parts:
            return self._reply(h, 404)
        if parts[0] != "latest":  # a versioned path
            return self._reply(h, 403 if method == "PUT" else 404)
        if method == "PUT":
            return self._token(h, parts)
        return self._get(h, instance_id, parts[1:])

    def _token(self, h: BaseHTTPRequestHandler, parts: list[str]) -> None:
        if parts != ["latest", "api", "token"]:
            return self._reply(h, 403)
        try:
            ttl = int(h.headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
        except ValueError:
            return self._reply(h, 400)
        if not 1 <= ttl <= 21600:
            return self._reply(h, 400)
        token = secrets.token_urlsafe(24)
        with self._lock:
            self.tokens[token] = self.clock() + ttl
        return self._reply(h, 200, token)

    def _get(self, h: BaseHTTPRequestHandler, instance_id: str, parts: list[str]) -> None:
        token = h.headers.get("X-aws-ec2-metadata-token", "")
        with self._lock:
            alive = self.tokens.get(token, 0.0) > self.clock()
            state = dict(self._instance(instance_id))
            fail = self.fail_with
        if not alive:
            return self._reply(h, 401)
        if fail is not None:
            return self._reply(h, fail)
        item = "/".join(parts[1:]) if parts[:1] == ["meta-data"] else None
        notice, rebalance = state["interruption"], state["rebalance"]
        if item == "spot/instance-action" and notice:
            return self._reply(h, 200, json.dumps(notice))
        if item == "spot/termination-time" and notice:
            return self._reply(h, 200, notice["time"])
        if item == "events/recommendations/rebalance" and rebalance:
            return self._reply(h, 200, json.dumps(rebalance))
        if item == "instance-life-cycle":
            return self._reply(h, 200, state["lifecycle"])
        if item == "instance-id":
            return self._reply(h, 200, instance_id)
        return self._reply(h, 404)
