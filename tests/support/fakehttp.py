"""What the fake clouds' HTTP servers share (``tests/providers/*/fake_server.py``).

* :class:`Fault` and :class:`Faults`: a fault a test asks for, and the queue a fake takes
  the first matching one from (fnmatch on the route, each fault ``times`` times).
* :func:`send`: write an answer (JSON, bytes or nothing) to a client that may have hung up
  (a timeout a test asked for), with the fake's :data:`ContentTypeRule`.
* :class:`QuietHandler` and :func:`start_server`: a threaded server on 127.0.0.1 whose
  handler passes every request to ``fake.handle(handler)`` and logs nothing.
* :class:`Sleeps`: a provider's sleep that only records, for the fixtures of its tests.
* The published contract: a fake with a ``contract`` attribute (a
  :class:`support.openapi_contract.ContractCheck`) has every request under the contract's
  prefix checked before it sees it (a non-conforming one gets the fake's refusal) and every
  answer :func:`send` gives to such a request checked too.
"""

from __future__ import annotations

import fnmatch
import io
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit

from corral.wire.bell import HEADER as BELL_HEADER
from support.openapi_contract import ContractCheck, Exchange

#: When an answer says its ``Content-Type``:
#:
#: * ``"always"``: on every answer, an empty one too (IO.net, FastAPI);
#: * ``"unless-204"``: on every answer but a 204 No Content (RunPod);
#: * ``"with-body"``: only on an answer with content (SaladCloud: a 202 with no body has none).
#:
#: A 204 never carries content (RFC 9110 15.3.5): its ``Content-Length`` is 0 and a body
#: given with it is not written, whatever the rule.
ContentTypeRule = Literal["always", "unless-204", "with-body"]


@dataclass
class Fault:
    """Answer the next ``times`` requests whose route matches ``target`` (fnmatch) with
    ``status``. ``after``: apply the request first, then answer with the fault anyway.
    ``retry_after``: a ``Retry-After`` header. A fake subclasses it for its own bodies."""

    target: str
    status: int = 500
    retry_after: float | None = None
    after: bool = False
    times: int = 1

    def headers(self) -> dict[str, str]:
        """The headers every fault answer carries: ``Retry-After`` when set."""
        if self.retry_after is None:
            return {}
        return {"Retry-After": f"{self.retry_after:g}"}


F = TypeVar("F", bound=Fault)


class Faults(Generic[F]):
    """The faults a test asked for, in order; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[F] = []

    def add(self, fault: F) -> F:
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, route: str) -> F | None:
        """The first fault with answers left whose target matches ``route``, one answer fewer;
        None if there is none."""
        with self._lock:
            for fault in self._faults:
                if fault.times > 0 and fnmatch.fnmatchcase(route, fault.target):
                    fault.times -= 1
                    return fault
        return None


def encode(body: Any) -> bytes:
    """An answer's bytes: bytes as they are, None as nothing, anything else as JSON."""
    if isinstance(body, bytes):
        return body
    return b"" if body is None else json.dumps(body).encode()


def send(
    h: BaseHTTPRequestHandler,
    status: int,
    body: Any,
    kind: str = "application/json",
    headers: dict[str, str] | None = None,
    *,
    content_type: ContentTypeRule,
) -> None:
    """Answer ``status`` with ``body`` (see :func:`encode`) of type ``kind`` and ``headers``
    (written first, in order). A client that hung up is no error: the answer is dropped."""
    data = b"" if status == 204 else encode(body)
    _check_answer(h, status, data, kind, headers or {})
    typed = {
        "always": True,
        "unless-204": status != 204,
        "with-body": bool(data),
    }[content_type]
    try:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        if typed:
            h.send_header("Content-Type", kind)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if data:
            h.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up (a timeout the test asked for)


def _check_answer(
    h: BaseHTTPRequestHandler, status: int, data: bytes, kind: str, headers: dict[str, str]
) -> None:
    """Check an answer against the contract the request it answers was checked against."""
    exchange: Exchange | None = getattr(h, "exchange", None)
    if exchange is None or not exchange.checked:
        return
    h.exchange = None  # type: ignore[attr-defined]  # one answer per request
    check = exchange.check
    check.record(
        check.contract.check_response(
            exchange.method, exchange.path, status, data, kind, headers, exchange.query
        )
    )


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive); GET, POST, PUT, PATCH and DELETE go to ``fake.handle(self)``,
    other methods get http.server's 501. Logs nothing. A request under the fake's contract
    (``fake.contract``) is checked first; one the real API would refuse is answered with the
    fake's refusal and never reaches the fake."""

    protocol_version = "HTTP/1.1"
    fake: Any
    exchange: Exchange | None = None

    def do_GET(self) -> None:
        self.exchange = None
        check: ContractCheck | None = getattr(self.fake, "contract", None)
        url = urlsplit(self.path)
        if check is None or not check.covers(url.path):
            return self.fake.handle(self)
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get(BELL_HEADER) is not None:
            # a controller's request to an agent (only the agent client names its bell), not
            # the provider's: another test's controller polling an agent whose loopback port
            # this fake now holds (the suite runs in parallel). Not the API's: 404, unrecorded
            if length:
                self.rfile.read(length)
            return send(self, 404, {"error": "not an agent"}, content_type="always")
        raw = self.rfile.read(length) if length else b""
        path = check.api_path(url.path)
        headers = dict(self.headers.items())
        violations = check.record(
            check.contract.check_request(self.command, path, url.query, headers, raw)
        )
        if violations:
            status, body = check.refuse(violations)  # the provider's own error shape
            return send(self, status, body, check.refuse_kind, content_type="always")
        self.exchange = Exchange(check, self.command, path, url.query)
        wire = self.rfile
        self.rfile = io.BytesIO(raw)  # type: ignore[assignment]  # the fake reads the body
        try:
            self.fake.handle(self)
        finally:
            self.rfile = wire  # the connection's next request
            self.exchange = None

    do_POST = do_DELETE = do_PATCH = do_PUT = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


def start_server(fake: Any, handler: type[QuietHandler] = QuietHandler) -> ThreadingHTTPServer:
    """A server on 127.0.0.1 (a free port) that ``handler`` answers for ``fake``, serving in a
    daemon thread. Stop it with ``shutdown()`` then ``server_close()``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (handler,), {"fake": fake}))
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


class Sleeps:
    """The provider's sleep: records and returns at once (tests never wait on backoff)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
