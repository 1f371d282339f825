"""The agent's HTTP API (stdlib ``ThreadingHTTPServer``, JSON bodies, bearer token).

Endpoints: ``GET /health``, ``GET /ready``, ``GET /status``, ``GET /events?after=N``,
``GET /logs``, ``GET /logs?stage=S&offset=N&limit=L``, ``POST /stop``,
``GET /artifacts/<name>.tar.gz`` (a file a hook packaged, streamed), ``GET /gpus`` (what each
GPU of the attempt reads: memory, utilisation, temperature, processes, ECC errors, the stage
holding it and for how long it has sat at zero utilisation under a running stage),
``GET /poll?events_after=N&logs=S:N,...`` (status, events and log bytes in one answer:
:mod:`corral.wire.poll`), ``POST /exec``, ``GET /exec/<id>``, ``POST /exec/<id>/kill`` (a command run on the node:
:mod:`corral.agent.execs`), ``GET /code`` and ``PUT /code/<sha256>?offset=N`` (the job's code
bundle), ``/services/<stage>/...`` (a service stage). ``docs/agent.md`` is the reference.

The probes ``/health`` and ``/ready`` (GET or HEAD) answer without a token, as a platform's
liveness, readiness or startup probe calls them, and then say nothing but liveness
(``{"ok": true}``, ``{"ready": ...}``); with the token they carry the run, the attempt and
the versions. Every other endpoint needs ``Authorization: Bearer <token>`` (else 401; an
agent handed its attempt over to this one takes the ended attempt's token for confirming that
same ``POST /attempt`` and nothing else). Only
authenticated requests count as a controller's call (``last_request_at``): a platform probing
the agent every few seconds never keeps an abandoned node alive.
Responses never contain the token or any environment value, nor a secret value of the job
(``CORRAL_SECRET_NAMES``: what a job reports as a metric, a note or a checkpoint path is
``***`` in ``/status`` and ``/events`` as it is in the stage logs).

Every answer is JSON, whatever the request: a method other than GET and POST (HEAD only for
the probes) is 405 with or without the token (never the standard library's HTML 501); a
malformed request line or header is 400. A body is read only up to
:data:`MAX_BODY` bytes and within :data:`BODY_TIMEOUT` seconds (a bad, huge or unkept
``Content-Length`` is a 400 at once or after that time, and the connection is closed), and a
connection that sends nothing for :data:`IDLE_TIMEOUT` seconds is closed: no request holds a
handler thread for long.

An answer leaves in one write (head and body together, up to :data:`WRITE_BUFFER` bytes)
on a socket with ``TCP_NODELAY``: a poll never waits for the client's delayed ACK.
"""

from __future__ import annotations

import contextlib
import hmac
import http.client
import json
import re
import shutil
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel

from corral.agent import logs, service_proxy
from corral.agent.api import MAX_EVENTS_PAGE, AgentApi, HttpError, handed_over_in
from corral.agent.bell import AgentBell
from corral.agent.execs import ExecError
from corral.agent.listen import listen
from corral.agent.services import Target
from corral.wire import WIRE_VERSION
from corral.wire.bell import HEADER as BELL_HEADER
from corral.wire.poll import (
    DEFAULT_LOG_LIMIT,
    decode_offsets,
)

#: the largest request body read (``POST /stop``: a small JSON object; ``POST /exec``)
MAX_BODY = 64 * 1024
#: the largest body of ``POST /attempt`` (a plan, which may carry a small code bundle) and
#: of ``POST /gang/start`` (the gang's nodes in every attempt so far)
MAX_PLAN_BODY = 8 * 1024 * 1024
#: seconds a request body has to arrive in full
BODY_TIMEOUT = 2.0
#: seconds a connection may send nothing (between requests, or within a request's head)
IDLE_TIMEOUT = 60.0
#: bytes an answer is gathered in before it is sent (a larger one goes out in pieces)
WRITE_BUFFER = 64 * 1024
#: the largest body of one ``PUT /code/<sha256>`` (a bundle goes up in pieces of this size)
MAX_CODE_CHUNK = 256 * 1024 * 1024
#: seconds an upload may send nothing before its connection is closed
UPLOAD_IDLE_TIMEOUT = 30.0
#: the method each path answers (any other method: 405)
_METHODS = {
    "/health": "GET",
    "/ready": "GET",
    "/status": "GET",
    "/events": "GET",
    "/logs": "GET",
    "/poll": "GET",
    "/stop": "POST",
    "/attempt": "POST",
    "/gang/start": "POST",
    "/gpus": "GET",
    "/code": "GET",
}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: methods a service stage may be called with through /services/<stage>/
SERVICE_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: the largest request body forwarded to a service, and how long it may take to arrive
SERVICE_MAX_BODY = 64 * 1024 * 1024
SERVICE_BODY_TIMEOUT = 60.0
#: paths answered without a token (platform probes), with what they reveal without it
_PROBES = frozenset({"/health", "/ready"})
#: the methods the API answers at all (HEAD: the probes only)
_KNOWN_METHODS = frozenset({"GET", "POST"})


_OWN_PREFIXES = ("/code/", "/artifacts/", "/services/", "/exec/")


def _own(path: str) -> bool:
    """The path is the agent's API's (a ``root`` service gets every other one)."""
    return path in _METHODS or path == "/exec" or path.startswith(_OWN_PREFIXES)


def _int_param(query: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name, [None])[-1]
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, f"{name} must be an integer")
    if not low <= value <= high:
        raise HttpError(400, f"{name} must be between {low} and {high}")
    return value


def _json_body(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise HttpError(400, "the body must be JSON")
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    return body


class _Handler(BaseHTTPRequestHandler):
    server: AgentServer
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT  # the socket's timeout (StreamRequestHandler.setup)
    #: TCP_NODELAY on the accepted socket (StreamRequestHandler.setup)
    disable_nagle_algorithm = True
    #: a buffered ``wfile``: head and body are gathered and flushed together
    wbufsize = WRITE_BUFFER

    def version_string(self) -> str:
        return "corral-agent"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the controller polls
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's error answers, as JSON. Its 501 for a method without a
        ``do_<METHOD>`` goes through the same checks as any request instead (a JSON 405)."""
        if code == HTTPStatus.NOT_IMPLEMENTED and self.command:
            self._dispatch(self.command)
            return
        self.close_connection = True  # the request could not be parsed: nothing after it can
        phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else "error"
        self._send(code, {"error": (message or phrase)[:200]})

    def _content_length(self, limit: int = MAX_BODY) -> int:
        """The body's announced length (0 without one); 400 for a length that is not one
        non-negative integer up to ``limit``, or a body in another framing."""
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(400, "Transfer-Encoding is not accepted: send a Content-Length")
        values = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if not values:
            return 0
        if len(values) > 1:
            raise HttpError(400, "conflicting Content-Length headers")
        raw = values.pop()
        if not (raw.isascii() and raw.isdigit()):
            raise HttpError(400, "Content-Length must be a non-negative integer")
        if len(raw) > 12 or int(raw) > limit:
            raise HttpError(400, f"Content-Length must be at most {limit}")
        return int(raw)

    def _read_body(self, length: int, timeout: float | None = None) -> bytes:
        """Exactly ``length`` bytes, within :data:`BODY_TIMEOUT` seconds in all (400 else)."""
        timeout = BODY_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        got = 0
        try:
            while got < length:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.connection.settimeout(left)
                chunk = self.rfile.read1(length - got)
                if not chunk:
                    raise HttpError(400, f"the body ended after {got} of {length} bytes")
                chunks.append(chunk)
                got += len(chunk)
        except (TimeoutError, OSError):
            msg = f"the body did not arrive: {got} of {length} bytes in {timeout:g} s"
            raise HttpError(400, msg) from None
        finally:
            self.connection.settimeout(self.timeout)
        return b"".join(chunks)

    def _dispatch(self, method: str) -> None:
        if self.server.stopped:
            # a kept-alive connection to an agent that no longer serves (a node handed over
            # to its next attempt serves that one on the same address): closed unanswered, so
            # the client asks again on a new connection, of whoever serves now
            self.close_connection = True
            return
        api = self.server.api
        status: int
        body: dict | BaseModel | Path
        url = urlsplit(self.path)
        if api.services and url.path.startswith("/services/"):
            self._service(method, api.services.target(url.path), url.query)
            return
        if api.services and not _own(url.path) and (root := api.services.root(url.path)):
            self._service(method, root, url.query)
            return
        try:
            upload = method == "PUT" and url.path.startswith("/code/")
            limit = MAX_PLAN_BODY if url.path in ("/attempt", "/gang/start") else MAX_BODY
            length = self._content_length(MAX_CODE_CHUNK if upload else limit)
            probe = url.path in _PROBES and method in ("GET", "HEAD")
            if method not in _KNOWN_METHODS and not probe and not upload:
                if length:  # the body is not read: nothing after it can be
                    self.close_connection = True
                raise HttpError(405, "method not allowed")
            authorized = self._authorized()
            if authorized and self.server.bell is not None:
                self.server.bell.heard_from(self.headers.get(BELL_HEADER))
            if probe and not authorized:
                if length:
                    self.close_connection = True
                status, body = self._probe(url.path)
            elif not authorized and self._handed_from(method, url.path):
                status, body = 202, self._confirm_hand_over(self._read_body(length))
            else:
                if not authorized:
                    raise HttpError(401, "unauthorized")
                query = parse_qs(url.query)
                if upload:
                    api.touch()
                    status, body = self._upload(url.path[len("/code/") :], query, length)
                else:
                    raw = self._read_body(length) if length else b""
                    api.touch()
                    route_method = "GET" if probe else method
                    status, body = self._route(route_method, url.path, query, raw)
        except HttpError as exc:
            status, body = exc.status, {"error": exc.message}
            if status in (400, 401, 405):  # a body may be left unread: end the connection
                self.close_connection = True
        except Exception as exc:  # never let a bug take the API down
            status, body = 500, {"error": f"internal error: {type(exc).__name__}"}
        if isinstance(body, Path):
            self._send_file(body)
        else:
            self._send(status, body)

    def _upload(self, sha256: str, query: dict[str, list[str]], length: int) -> tuple[int, dict]:
        """``PUT /code/<sha256>?offset=N``: stream the body into the attempt's bundle (each
        read may wait :data:`UPLOAD_IDLE_TIMEOUT` seconds; there is no limit on the whole)."""
        if not _SHA256.match(sha256):
            raise HttpError(400, "expected /code/<sha256 of the bundle>")
        offset = _int_param(query, "offset", 0, 0, 2**62)
        left = [length]

        def chunk() -> bytes:
            if left[0] <= 0:
                return b""
            self.connection.settimeout(UPLOAD_IDLE_TIMEOUT)
            try:
                data = self.rfile.read1(min(left[0], 1024 * 1024))
            except (TimeoutError, OSError):
                data = b""
            if not data:
                self.close_connection = True
                raise HttpError(400, f"the body ended after {length - left[0]} of {length} bytes")
            left[0] -= len(data)
            return data

        try:
            answer = self.server.api.code_upload(sha256, offset, chunk)
        finally:
            self.connection.settimeout(self.timeout)
            if left[0] > 0:
                self.close_connection = True  # the rest of the body was not read
        return 200, answer

    def _service(self, method: str, target: Target | None, query: str) -> None:
        """Forward a request to a service stage (``/services/<stage>[:<port>]/...``, or any
        path outside the agent's API to the ``root`` one): without a token when the service
        is public, else with the agent's. The answer streams back as the service writes it; an
        upgrade (a websocket) becomes a tunnel. Errors are JSON, like the API's."""
        api = self.server.api
        upgrade = service_proxy.wants_upgrade(self.headers)
        try:
            if target is None:
                raise HttpError(404, "no such service")
            if method not in SERVICE_METHODS:
                raise HttpError(405, "method not allowed")
            length = 0 if upgrade else self._content_length(SERVICE_MAX_BODY)
            if not target.public and not self._authorized():
                raise HttpError(401, "unauthorized")
            if not api.runner.stage_running(target.stage):
                raise HttpError(503, f"service {target.stage!r} is not running")
            raw = self._read_body(length, SERVICE_BODY_TIMEOUT) if length else b""
        except HttpError as exc:
            self.close_connection = True
            self._send(exc.status, {"error": exc.message})
            return
        path = target.path + (f"?{query}" if query else "")
        headers = service_proxy.request_headers(
            list(self.headers.items()), public=target.public, prefix=target.prefix, tunnel=upgrade
        )
        try:
            if upgrade:
                service_proxy.tunnel(self, target.port, method, path, headers)
            else:
                service_proxy.stream(self, target.port, method, path, headers, raw)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            self.close_connection = True
            self._send(
                502, {"error": f"service {target.stage!r} did not answer: {type(exc).__name__}"}
            )

    def _probe(self, path: str) -> tuple[int, dict]:
        """A probe without the token: liveness, and readiness, and nothing else."""
        if path == "/health":
            return 200, {"ok": True}
        ready = self.server.api.ready
        return (200 if ready else 503), {"ready": ready}

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw: bytes = b""
    ) -> tuple[int, dict | BaseModel | Path]:
        api = self.server.api
        if method not in ("GET", "POST"):
            raise HttpError(405, "method not allowed")
        if path.startswith("/artifacts/"):
            if method != "GET":
                raise HttpError(405, "method not allowed")
            return 200, api.package(path[len("/artifacts/") :])
        if path == "/exec" or path.startswith("/exec/"):
            return self._exec(method, path, query, raw)
        if path not in _METHODS:
            raise HttpError(404, "not found")
        if method != _METHODS[path]:
            raise HttpError(405, "method not allowed")
        if path == "/health":
            return 200, api.health()
        if path == "/ready":
            ready = {"ready": api.ready, "wire_version": WIRE_VERSION}
            return (200 if api.ready else 503), ready
        if path == "/status":
            return 200, api.status()
        if path == "/gpus":
            return 200, api.gpu_report()
        if path == "/code":
            return 200, api.code()
        if path == "/events":
            after = _int_param(query, "after", 0, 0, 2**62)
            limit = _int_param(query, "limit", MAX_EVENTS_PAGE, 1, MAX_EVENTS_PAGE)
            return 200, api.events_after(after, limit)
        if path == "/poll":
            after = _int_param(query, "events_after", 0, 0, 2**62)
            limit = _int_param(query, "log_limit", DEFAULT_LOG_LIMIT, 1, logs.MAX_LIMIT)
            try:
                offsets = decode_offsets(query.get("logs", [""])[-1])
            except ValueError as e:
                raise HttpError(400, str(e)) from None
            return 200, api.poll(after, offsets, limit)
        if path == "/logs":
            stage = query.get("stage", [None])[-1]
            if stage is None:
                return 200, api.log_sizes()
            offset = _int_param(query, "offset", 0, 0, 2**62)
            limit = _int_param(query, "limit", logs.DEFAULT_LIMIT, 1, logs.MAX_LIMIT)
            return 200, api.log_chunk(stage, offset, limit)
        if path == "/gang/start":
            return 202, api.start_gang(_json_body(raw))
        if path == "/attempt":
            return 202, api.hand_over(_json_body(raw))
        return 202, api.stop(_json_body(raw))

    def _exec(
        self, method: str, path: str, query: dict[str, list[str]], raw: bytes
    ) -> tuple[int, dict]:
        """``POST /exec`` ``{"argv": [...], "timeout_s": N}``, ``GET /exec/<id>?offset=N``
        and ``POST /exec/<id>/kill`` (:mod:`corral.agent.execs`)."""
        execs = self.server.api.execs
        parts = path.strip("/").split("/")
        try:
            if parts == ["exec"]:
                if method != "POST":
                    raise HttpError(405, "method not allowed")
                body = _json_body(raw)
                return 201, execs.start(body.get("argv"), body.get("timeout_s"))
            if len(parts) == 2 and method == "GET":
                offset = _int_param(query, "offset", 0, 0, 2**62)
                limit = _int_param(query, "limit", logs.DEFAULT_LIMIT, 1, logs.MAX_LIMIT)
                return 200, execs.read(parts[1], offset, limit)
            if len(parts) == 3 and parts[2] == "kill" and method == "POST":
                return 202, execs.kill(parts[1])
        except ExecError as exc:
            raise HttpError(exc.status, exc.message) from None
        if len(parts) in (2, 3):
            raise HttpError(405, "method not allowed")
        raise HttpError(404, "not found")

    def _authorized(self, token: bytes | None = None) -> bool:
        """Whether the request carries the server's token (or ``token``)."""
        header = self.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), token or self.server.token)

    def _handed_from(self, method: str, path: str) -> bool:
        """A ``POST /attempt`` with the token of the attempt this one was handed over from."""
        previous = self.server.handed_from
        if method != "POST" or path != "/attempt" or previous is None:
            return False
        return self._authorized(previous)

    def _confirm_hand_over(self, raw: bytes) -> dict:
        """``POST /attempt`` again, with the ended attempt's token, once this attempt serves:
        a controller that lost the answer to its hand-over asks again. The same hand-over
        (this run and attempt, with this attempt's token) is answered as it was; anything
        else is 401, as that token opens nothing else here."""
        plan = self.server.api.runner.plan
        if not handed_over_in(_json_body(raw), plan, self.server.token.decode()):
            raise HttpError(401, "unauthorized")
        return {"attempt": plan.attempt}

    def _send(self, status: int, body: dict | BaseModel) -> None:
        """A JSON answer (its head only to a HEAD request, as HTTP wants). Always with a status
        line and headers: a request without a valid version (HTTP/0.9 style) gets HTTP/1.0's.
        A wire model is serialised by pydantic (``model_dump(mode="json")`` when a secret
        value is to be masked in it first)."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
            self.close_connection = True
        redactor = self.server.api.redactor
        if isinstance(body, BaseModel) and not redactor:  # nothing to mask: straight to JSON
            payload = body.model_dump_json().encode()
        else:
            if isinstance(body, BaseModel):
                body = body.model_dump(mode="json")
            payload = json.dumps(redactor.redact_data(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        if status == 405:
            path = urlsplit(self.path).path
            allow = _METHODS.get(path, "GET")
            self.send_header("Allow", f"{allow}, HEAD" if path in _PROBES else allow)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()  # the head and the body, in one write

    def _send_file(self, path: Path) -> None:
        """Stream a file (opened first: a later replace of the path does not matter)."""
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError:
            self._send(404, {"error": f"{path.name} is not available"})
            return
        with f:
            size = f.seek(0, 2)
            f.seek(0)
            self.send_response(200)
            self.send_header("Content-Type", "application/gzip")
            self.send_header("Content-Length", str(size))
            self.send_header("Content-Disposition", f'attachment; filename="{path.name}"')
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            shutil.copyfileobj(f, self.wfile, 1024 * 1024)
            self.wfile.flush()


class AgentServer(ThreadingHTTPServer):
    """The agent's server, on a socket :func:`corral.agent.listen.listen` bound (given, or
    bound here from an address): dual-stack for an IPv6 host where the system allows it."""

    daemon_threads = True

    def __init__(
        self,
        listener: socket.socket | tuple[str, int],
        api: AgentApi,
        token: str,
        *,
        bell: AgentBell | None = None,
        handed_from: str | None = None,
    ) -> None:
        self.api = api
        self.token = token.encode()
        #: the token of the attempt this one was handed over from (``POST /attempt``): it
        #: opens nothing but the confirmation of that same hand-over
        self.handed_from = handed_from.encode() if handed_from else None
        #: set once :meth:`stop` begins: a kept-alive connection is answered no more
        self.stopped = False
        #: the controller's bell, learnt from its requests (``agent.bell``)
        self.bell = bell
        if isinstance(listener, tuple):
            listener = listen(*listener)
        self.address_family = socket.AddressFamily(listener.family)
        super().__init__(listener.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()  # the one socketserver made; the bound one serves
        self.socket = listener
        self.server_address = listener.getsockname()
        host, port = self.server_address[:2]
        # what HTTPServer.server_bind would set, without its reverse DNS lookup of the host
        # (``socket.getfqdn``, for a name nothing here uses: seconds on a node whose
        # resolver does not answer)
        self.server_name, self.server_port = str(host), int(port)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def stop(self) -> None:
        """Stop serving now and close the socket. ``serve_forever`` sees a stop only between
        two waits of up to its poll interval; a connection to the server itself ends the wait
        at once (an agent that exits is gone from its machine that much sooner). A request
        on a connection kept alive from before is closed unanswered from now on."""
        self.stopped = True
        stopper = threading.Thread(target=self.shutdown, name="http-stop", daemon=True)
        stopper.start()
        host = str(self.server_address[0])
        if host in ("0.0.0.0", "::", ""):
            host = "::1" if self.address_family == socket.AF_INET6 else "127.0.0.1"
        for _ in range(20):
            with contextlib.suppress(OSError):
                socket.create_connection((host, self.port), timeout=0.05).close()
            stopper.join(0.02)
            if not stopper.is_alive():
                break
        stopper.join()
        self.server_close()
