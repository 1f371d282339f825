"""The agent's HTTP API (stdlib ``ThreadingHTTPServer``, JSON bodies, bearer token).

Every request needs ``Authorization: Bearer <token>`` (else 401). Endpoints: ``GET /health``,
``GET /ready``, ``GET /status``, ``GET /events?after=N``, ``GET /logs``,
``GET /logs?stage=S&offset=N&limit=L``, ``POST /stop``, ``GET /artifacts/<name>.tar.gz`` (a
file a hook packaged, streamed). ``docs/agent.md`` is the reference.
Responses never contain the token or any environment value.
"""

from __future__ import annotations

import hmac
import json
import re
import shutil
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from corral import __version__
from corral.agent import logs
from corral.agent.events import EventLog
from corral.agent.progress import ProgressTailer
from corral.agent.runner import SETUP, Runner
from corral.wire import WIRE_VERSION
from corral.wire.outcome import StopCause

GPU_USAGE_TTL = 5.0
MAX_EVENTS_PAGE = 1000
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

    def version_string(self) -> str:
        return "corral-agent"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the controller polls
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        try:
            length = max(0, int(self.headers.get("Content-Length") or 0))
        except ValueError:
            length = 0
        raw = self.rfile.read(min(length, 1 << 20)) if length else b""
        api = self.server.api
        try:
            if not self._authorized():
                raise HttpError(401, "unauthorized")
            api.touch()
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            status, body = self._route(method, url.path, query, raw)
        except HttpError as exc:
            status, body = exc.status, {"error": exc.message}
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
        if path.startswith("/artifacts/"):
            if method != "GET":
                raise HttpError(405, "method not allowed")
            return 200, api.package(path[len("/artifacts/") :])
        routes = {"/health", "/ready", "/status", "/events", "/logs", "/stop"}
        if path not in routes:
            raise HttpError(404, "not found")
        if (method == "POST") != (path == "/stop"):
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
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        self.wfile.write(payload)

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
