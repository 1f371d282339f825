"""A webhook receiver on loopback for the tests: verifies every signature, records requests."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from corral.errors import CorralError
from corral.notify import verify
from support.waiting import wait_until


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    signature_ok: bool | None  # None: unsigned
    status: int  # what the receiver answered

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def type(self) -> str:
        return self.headers["x-corral-event"]


@dataclass
class Receiver:
    """``statuses``: answers for the next requests (then 200); ``delay``: seconds each request
    takes; ``retry_after``: a Retry-After header sent with non-2xx answers."""

    secret: str | None = None
    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    retry_after: str | None = None
    tolerance: float = 0.0  # the tests' fake clocks are far from real time
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver._handle(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook/t0ken-in-path"

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        ok: bool | None = None
        if "x-corral-signature" in headers:
            try:
                verify(
                    self.secret or "",
                    headers.get("x-corral-timestamp", ""),
                    body,
                    headers["x-corral-signature"],
                    tolerance=self.tolerance,
                )
                ok = True
            except CorralError:
                ok = False
        with self._lock:
            status = self.statuses.pop(0) if self.statuses else 200
            self.requests.append(Request(handler.path, headers, body, ok, status))
        if self.delay:
            time.sleep(self.delay)
        try:
            handler.send_response(status)
            if status >= 300 and self.retry_after:
                handler.send_header("Retry-After", self.retry_after)
            handler.send_header("Content-Length", "2")
            handler.end_headers()
            handler.wfile.write(b"ok")
        except OSError:  # the sender timed out and went away
            pass

    def accepted(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if 200 <= r.status < 300]

    def types(self) -> list[str]:
        return [r.type for r in self.accepted()]

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Request]:
        return wait_until(
            lambda: len(accepted := self.accepted()) >= count and accepted,
            timeout,
            0.01,
            lambda: f"{count} deliveries; {len(self.accepted())} arrived",
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
