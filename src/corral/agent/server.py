"""The agent's HTTP API (stdlib ``ThreadingHTTPServer``, JSON bodies, bearer token).

Every request needs ``Authorization: Bearer <token>`` (else 401). Endpoints: ``GET /health``,
``GET /ready``, ``GET /status``, ``GET /events?after=N``, ``GET /logs``,
``GET /logs?stage=S&offset=N&limit=L``, ``POST /stop``, ``GET /artifacts/<name>.tar.gz`` (a
file a hook packaged, streamed). ``docs/agent.md`` is the reference.
Responses never contain the token or any environment value, nor a secret value of the job
(``CORRAL_SECRET_NAMES``: what a job reports as a metric, a note or a checkpoint path is
``***`` in ``/status`` and ``/events`` as it is in the stage logs).

Every answer is JSON, whatever the request: any other method is 401 without the token and 405
with it; a malformed request line or header is 400. A body is read only up to
:data:`MAX_BODY` bytes and within :data:`BODY_TIMEOUT` seconds (a bad, huge or unkept
``Content-Length`` is a 400 at once or after that time, and the connection is closed), and a
connection that sends nothing for :data:`IDLE_TIMEOUT` seconds is closed: no request holds a
handler thread for long.

An answer leaves in one write (head and body together, up to :data:`WRITE_BUFFER` bytes)
on a socket with ``TCP_NODELAY``: a poll never waits for the client's delayed ACK.
"""

from __future__ import annotations

import hmac
import json
import re
import shutil
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from corral import __version__
from corral.agent import logs
from corral.agent.events import EventLog
from corral.agent.progress import ProgressTailer
from corral.agent.runner import SETUP, Runner
from corral.secrets.redact import Redactor
from corral.wire import WIRE_VERSION
from corral.wire.outcome import StopCause

GPU_USAGE_TTL = 5.0
MAX_EVENTS_PAGE = 1000
#: the largest request body read (only ``POST /stop`` takes one: a small JSON object)
MAX_BODY = 64 * 1024
#: seconds a request body has to arrive in full
BODY_TIMEOUT = 2.0
#: seconds a connection may send nothing (between requests, or within a request's head)
IDLE_TIMEOUT = 60.0
#: bytes an answer is gathered in before it is sent (a larger one goes out in pieces)
WRITE_BUFFER = 64 * 1024
#: the method each path answers (any other method: 405)
_METHODS = {
    "/health": "GET",
    "/ready": "GET",
    "/status": "GET",
    "/events": "GET",
    "/logs": "GET",
    "/stop": "POST",
}
#: what a name under /artifacts/ may look like (no separators, no "..")
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*\.tar\.gz$")


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class AgentApi:
    """What the endpoints answer, without HTTP (the handler only parses and serialises)."""

    def __init__(
        self,
        runner: Runner,
        events: EventLog,
        tailer: ProgressTailer,
        gpu_ids: list[str],
        usage: Callable[[list[str]], list[Any]],
        pid: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.runner = runner
        self.events = events
        self.tailer = tailer
        self.gpu_ids = gpu_ids
        self._usage = usage
        self._pid = pid
        self._clock = clock
        self._gpu_lock = threading.Lock()
        self._gpu_cache: tuple[float, list[dict]] | None = None
        self.ready = False
        #: the job's secret values, masked in every answer (values and keys)
        self.redactor = Redactor(v.decode("utf-8", "replace") for v in runner.secret_values())
        #: monotonic time of the last authenticated request (for "is the controller gone?").
        self.last_request_at: float | None = None

    def touch(self) -> None:
        self.last_request_at = self._clock()

    def health(self) -> dict:
        plan = self.runner.plan
        return {
            "ok": True,
            "run_id": plan.run_id,
            "attempt": plan.attempt,
            "pid": self._pid,
            "version": __version__,
            "wire_version": WIRE_VERSION,
        }

    def gpus(self) -> list[dict]:
        with self._gpu_lock:
            now = self._clock()
            if self._gpu_cache is None or now - self._gpu_cache[0] >= GPU_USAGE_TTL:
                try:
                    rows = [
                        {
                            "id": u.id,
                            "utilization_pct": u.utilization_pct,
                            "memory_used_mb": u.memory_used_mb,
                            "memory_total_mb": u.memory_total_mb,
                        }
                        for u in self._usage(self.gpu_ids)
                    ]
                except Exception:  # GPU usage is informative: never fail /status for it
                    rows = []
                self._gpu_cache = (now, rows)
            return [dict(r) for r in self._gpu_cache[1]]

    def status(self) -> dict:
        return {
            **self.runner.status(),
            "gpus": self.gpus(),
            "last_checkpoint": self.tailer.last_checkpoint(),
        }

    def events_after(self, after: int, limit: int) -> dict:
        page, next_after = self.events.after(after, limit)
        return {"events": page, "next": next_after}

    def log_names(self) -> list[str]:
        names = [s.name for s in self.runner.plan.stages]
        return [SETUP, *names] if self.runner.plan.setup else names

    def log_sizes(self) -> dict:
        directory = self.runner.logs_dir
        return {"stages": {n: logs.log_size(directory / f"{n}.log") for n in self.log_names()}}

    def log_chunk(self, stage: str, offset: int, limit: int) -> dict:
        if stage not in self.log_names():
            raise HttpError(404, f"unknown stage {stage!r}")
        finished = self.runner.stage_finished(stage)  # read before the file: no lost tail
        path = self.runner.logs_dir / f"{stage}.log"
        data, next_offset = logs.read_chunk(path, offset, limit)
        eof = finished and next_offset >= logs.log_size(path)
        return {
            "stage": stage,
            "offset": offset,
            "next_offset": next_offset,
            "data": data.decode("utf-8", errors="replace"),
            "eof": eof,
        }

    def stop(self, body: dict[str, Any] | None = None) -> dict:
        """``POST /stop`` with an optional JSON body ``{"cause": "budget", "reason": "..."}``
        (cause: a :class:`~corral.wire.outcome.StopCause`; default ``user``)."""
        body = body or {}
        cause = StopCause.parse(body.get("cause")) or StopCause.USER
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            reason = "stop requested through the API"
        self.runner.request_stop(reason[:500], cause)
        return {"stopping": True}

    def package(self, name: str) -> Path:
        """The packaged file ``name`` a hook built (``hook.package(name) -> Path | None``)."""
        if not _PACKAGE_NAME.match(name):
            raise HttpError(400, "invalid artifact name")
        for hook in self.runner.hooks:
            find = getattr(hook, "package", None)
            path = find(name) if find is not None else None
            if path is not None:
                return path
        raise HttpError(404, f"{name} is not packaged (yet)")


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

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's error answers, as JSON. Its 501 for a method without a
        ``do_<METHOD>`` goes through the same checks as any request instead (401, then 405)."""
        if code == HTTPStatus.NOT_IMPLEMENTED and self.command:
            self._dispatch(self.command)
            return
        self.close_connection = True  # the request could not be parsed: nothing after it can
        phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else "error"
        self._send(code, {"error": (message or phrase)[:200]})

    def _content_length(self) -> int:
        """The body's announced length (0 without one); 400 for a length that is not one
        non-negative integer up to :data:`MAX_BODY`, or a body in another framing."""
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
        if len(raw) > 12 or int(raw) > MAX_BODY:
            raise HttpError(400, f"Content-Length must be at most {MAX_BODY}")
        return int(raw)

    def _read_body(self, length: int) -> bytes:
        """Exactly ``length`` bytes, within :data:`BODY_TIMEOUT` seconds in all (400 else)."""
        deadline = time.monotonic() + BODY_TIMEOUT
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
            msg = f"the body did not arrive: {got} of {length} bytes in {BODY_TIMEOUT:g} s"
            raise HttpError(400, msg) from None
        finally:
            self.connection.settimeout(self.timeout)
        return b"".join(chunks)

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        status: int
        try:
            length = self._content_length()
            if not self._authorized():
                raise HttpError(401, "unauthorized")
            raw = self._read_body(length) if length else b""
            api.touch()
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            status, body = self._route(method, url.path, query, raw)
        except HttpError as exc:
            status, body = exc.status, {"error": exc.message}
            if status in (400, 401):  # a body may be left unread: end the connection
                self.close_connection = True
        except Exception as exc:  # never let a bug take the API down
            status, body = 500, {"error": f"internal error: {type(exc).__name__}"}
        if isinstance(body, Path):
            self._send_file(body)
        else:
            self._send(status, body)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw: bytes = b""
    ) -> tuple[int, dict | Path]:
        api = self.server.api
        if method not in ("GET", "POST"):
            raise HttpError(405, "method not allowed")
        if path.startswith("/artifacts/"):
            if method != "GET":
                raise HttpError(405, "method not allowed")
            return 200, api.package(path[len("/artifacts/") :])
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
        if path == "/events":
            after = _int_param(query, "after", 0, 0, 2**62)
            limit = _int_param(query, "limit", MAX_EVENTS_PAGE, 1, MAX_EVENTS_PAGE)
            return 200, api.events_after(after, limit)
        if path == "/logs":
            stage = query.get("stage", [None])[-1]
            if stage is None:
                return 200, api.log_sizes()
            offset = _int_param(query, "offset", 0, 0, 2**62)
            limit = _int_param(query, "limit", logs.DEFAULT_LIMIT, 1, logs.MAX_LIMIT)
            return 200, api.log_chunk(stage, offset, limit)
        return 202, api.stop(_json_body(raw))

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self.server.token)

    def _send(self, status: int, body: dict) -> None:
        """A JSON answer (its head only to a HEAD request, as HTTP wants). Always with a status
        line and headers: a request without a valid version (HTTP/0.9 style) gets HTTP/1.0's."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
            self.close_connection = True
        payload = json.dumps(self.server.api.redactor.redact_data(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        if status == 405:
            self.send_header("Allow", _METHODS.get(urlsplit(self.path).path, "GET"))
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
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: AgentApi, token: str):
        self.api = api
        self.token = token.encode()
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])
