"""HTTP client for the agent API (see docs/agent.md). The controller polls; the agent never
calls the controller, so one exposed port is all a node needs.

A controller calls every agent through one :class:`AgentPool` (one connection pool): an
:class:`AgentClient` is then an endpoint and a token, a few hundred bytes, and closing it
leaves the pool alone.

The pool speaks HTTP/1.1 over the standard library's ``http.client`` with kept-alive
connections per agent (:class:`LeanTransport`): a poll is the controller's most frequent
call, and this costs about a tenth of the CPU of a general-purpose client per request. With a
proxy configured in the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``) the
pool uses ``httpx``, which honours it (:class:`HttpxTransport`); an ``httpx.Client`` given
explicitly is used as is (tests give one with a mock transport).
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.request
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode, urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from corral.errors import AgentError, AgentUnreachable
from corral.wire import check_version
from corral.wire.bell import HEADER as BELL_HEADER
from corral.wire.events import EventsPage
from corral.wire.gang import GangRole, GangStart, NodeAttempt
from corral.wire.outcome import StopCause
from corral.wire.plan import AgentPlan
from corral.wire.poll import (
    DEFAULT_LOG_LIMIT,
    LogSizes,
    PollAnswer,
    StageLogChunk,
    encode_offsets,
)
from corral.wire.status import AgentStatus

_M = TypeVar("_M", bound=BaseModel)

#: seconds an agent has to answer one request
DEFAULT_TIMEOUT = 5.0
#: seconds one read or write of a code upload may take
UPLOAD_TIMEOUT = 120.0
#: idle connections the shared pool keeps open (one per agent polled recently, up to this)
KEEPALIVE_CONNECTIONS = 256


class Transport(Protocol):
    """What an agent client sends its requests through: the status and the body's bytes."""

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        timeout: float,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content: bytes | None = None,
    ) -> tuple[int, bytes]: ...

    def close(self) -> None: ...

    @property
    def is_closed(self) -> bool: ...


class TransportError(Exception):
    """The request did not get an answer (``timeout``: it ran out of time)."""

    def __init__(self, what: str, *, timeout: bool = False):
        super().__init__(what)
        self.what = what
        self.timeout = timeout


class HttpxTransport:
    """Requests through an ``httpx.Client`` (proxies from the environment; mock transports)."""

    def __init__(self, client: httpx.Client):
        self.client = client

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        timeout: float,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content: bytes | None = None,
    ) -> tuple[int, bytes]:
        try:
            resp = self.client.request(
                method,
                url,
                headers=headers,
                timeout=timeout,
                params=params,
                json=body,
                content=content,
            )
        except httpx.TimeoutException:
            raise TransportError("timed out", timeout=True) from None
        except httpx.HTTPError as e:
            raise TransportError(type(e).__name__) from None
        return resp.status_code, resp.content

    def close(self) -> None:
        self.client.close()

    @property
    def is_closed(self) -> bool:
        return self.client.is_closed


_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class LeanTransport:
    """HTTP/1.1 over ``http.client``: kept-alive connections, per origin, shared by threads
    (one thread uses a connection at a time), at most ``keepalive`` idle ones kept. A request
    on a kept connection that the agent has closed meanwhile is sent again on a new one."""

    def __init__(self, keepalive: int = KEEPALIVE_CONNECTIONS):
        self._keepalive = keepalive
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._closed = False
        self._tls: ssl.SSLContext | None = None

    def _take(
        self, origin: tuple[str, str, int], timeout: float, *, fresh: bool = False
    ) -> tuple[Any, bool]:
        """A connection to ``origin``: a kept one if any (and not ``fresh``), else a new one;
        and whether it was kept."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the agent connection pool is closed")
            idle = None if fresh else self._idle.get(origin)
            if idle:
                self._count -= 1
                conn = idle.pop()
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                return conn, True
        scheme, host, port = origin
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            return http.client.HTTPSConnection(
                host, port, timeout=timeout, context=self._tls
            ), False
        return http.client.HTTPConnection(host, port, timeout=timeout), False

    def _drop(self, origin: tuple[str, str, int]) -> None:
        """Close every kept connection to ``origin``."""
        with self._lock:
            idle = self._idle.pop(origin, [])
            self._count -= len(idle)
        for conn in idle:
            conn.close()

    def _give_back(self, origin: tuple[str, str, int], conn: Any) -> None:
        with self._lock:
            if not self._closed and self._count < self._keepalive:
                self._idle.setdefault(origin, []).append(conn)
                self._count += 1
                return
        conn.close()

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        timeout: float,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content: bytes | None = None,
    ) -> tuple[int, bytes]:
        parts = urlsplit(url)
        scheme = parts.scheme or "http"
        port = parts.port or (443 if scheme == "https" else 80)
        origin = (scheme, parts.hostname or "", port)
        target = parts.path or "/"
        query = "&".join(q for q in (parts.query, urlencode(params or {})) if q)
        if query:
            target += "?" + query
        payload = None
        headers = dict(headers)
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif content is not None:
            payload = content
            headers["Content-Type"] = "application/octet-stream"
        for attempt in (0, 1):
            conn, reused = self._take(origin, timeout, fresh=attempt > 0)
            try:
                conn.request(method, target, body=payload, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except _STALE as e:
                conn.close()
                if reused and attempt == 0:
                    # the agent closed a kept connection (it restarted, or a node's next
                    # attempt serves its address now): its other kept ones are as stale, so
                    # they go too, and the request is sent once more on a new one
                    self._drop(origin)
                    continue
                raise TransportError(type(e).__name__) from None
            except TimeoutError:
                conn.close()
                raise TransportError("timed out", timeout=True) from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(type(e).__name__) from None
            if resp.will_close:
                conn.close()
            else:
                self._give_back(origin, conn)
            return resp.status, data
        raise TransportError("no answer")  # not reached: the second try returns or raises

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle, self._count = self._idle, {}, 0
        for conns in idle.values():
            for conn in conns:
                conn.close()

    @property
    def is_closed(self) -> bool:
        return self._closed


def _proxied() -> bool:
    """Whether the environment asks for an HTTP proxy (then httpx, which honours it)."""
    proxies = urllib.request.getproxies()
    return any(k in proxies for k in ("http", "https", "all"))


def default_transport(timeout: float = DEFAULT_TIMEOUT) -> Transport:
    """The lean transport, or httpx's where a proxy is configured."""
    if _proxied():
        return HttpxTransport(httpx.Client(timeout=timeout))
    return LeanTransport()


def _transport(client: Any) -> Transport:
    return HttpxTransport(client) if isinstance(client, httpx.Client) else client


class AgentClient:
    """The API of one agent. With ``client`` (a shared pool: a :class:`Transport` or an
    ``httpx.Client``) it borrows that client and :meth:`close` leaves it open; without one
    it opens its own and closes it."""

    __slots__ = ("_client", "_headers", "_owns_client", "_timeout", "endpoint")

    def __init__(
        self,
        endpoint: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: Transport | httpx.Client | None = None,
    ):
        self.endpoint = endpoint.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": "corral-controller"}
        self._timeout = timeout
        self._client: Transport = (
            _transport(client) if client is not None else default_transport(timeout)
        )
        self._owns_client = client is None

    def bell_at(self, header: str) -> None:
        """Name the controller's bell in every request (``corral.wire.bell``)."""
        if self._headers.get(BELL_HEADER) != header:
            self._headers = {**self._headers, BELL_HEADER: header}

    def close(self) -> None:
        """Close the client's own connection pool; a shared one stays open."""
        if self._owns_client:
            self._client.close()

    def _fetch(
        self,
        method: str,
        path: str,
        *,
        unavailable_ok: bool = False,
        **kw: Any,
    ) -> tuple[int, bytes]:
        """The status and the body's bytes of one call. A 503 is an answer only where
        ``unavailable_ok`` (``/ready`` while the agent starts); elsewhere it is
        AgentUnreachable (a proxy or a load balancer in front of the agent says so, not the
        agent)."""
        url = self.endpoint + path
        try:
            status, content = self._client.request(
                method,
                url,
                self._headers,
                float(kw.get("timeout", self._timeout)),
                params=kw.get("params"),
                body=kw.get("json"),
                content=kw.get("content"),
            )
        except TransportError as e:
            if e.timeout:
                raise AgentUnreachable(f"agent at {self.endpoint} timed out on {path}") from None
            raise AgentUnreachable(f"agent at {self.endpoint} unreachable: {e.what}") from None
        if status == 401:
            raise AgentError(f"agent at {self.endpoint} rejected the controller's token")
        if status == 503 and not unavailable_ok:
            raise AgentUnreachable(f"agent at {self.endpoint} unavailable (503) on {path}")
        if status >= 400 and status != 503:
            raise AgentError(f"agent at {self.endpoint} answered {status} on {path}")
        return status, content

    def _json(self, content: bytes, path: str) -> dict[str, Any]:
        try:
            body = json.loads(content)
        except ValueError as e:
            raise AgentError(f"agent at {self.endpoint} sent a non-JSON answer on {path}") from e
        if not isinstance(body, dict):
            raise AgentError(f"agent at {self.endpoint} sent a non-JSON answer on {path}")
        return body

    def _request(
        self,
        method: str,
        path: str,
        *,
        unavailable_ok: bool = False,
        **kw: Any,
    ) -> dict[str, Any]:
        """The JSON answer to one call (see :meth:`_fetch`)."""
        status, content = self._fetch(method, path, unavailable_ok=unavailable_ok, **kw)
        body = self._json(content, path)
        if status == 503:
            body.setdefault("ready", False)
        return body

    def _answer(self, model: type[_M], path: str, what: str, **kw: Any) -> _M:
        """``GET path`` as ``model``: the bytes validated once, straight from JSON (no
        intermediate dicts: the cheapest way for the controller's most frequent call). A
        versioned answer (one with ``wire_version``) of another version raises
        WireVersionMismatch, whatever its shape; a malformed one, or one with a key the
        model does not know, is an AgentError naming the first wrong field."""
        _, content = self._fetch("GET", path, **kw)
        versioned = "wire_version" in model.model_fields
        try:
            answer = model.model_validate_json(content)
        except ValidationError as e:
            body = self._json(content, path)
            if versioned:
                check_version(body.get("wire_version"), who=f"agent at {self.endpoint}")
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or what
            raise AgentError(
                f"agent at {self.endpoint} sent a malformed {what} ({where}: {first['msg']})"
            ) from None
        if versioned:
            check_version(getattr(answer, "wire_version", None), who=f"agent at {self.endpoint}")
        return answer

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def ready(self) -> bool:
        """Whether the agent serves its attempt. An agent of another wire version raises
        :class:`~corral.errors.WireVersionMismatch` naming both versions; one that does not
        take this client's token (another attempt's agent on the address: a node handed over
        to the next attempt, a port used again) an AgentError saying so."""
        body = self._request("GET", "/ready", unavailable_ok=True)
        ready = bool(body.get("ready"))
        if ready and "wire_version" not in body:
            # a probe's answer, which says nothing but readiness: either a corral from before
            # the versioned contract or an agent that did not take the token. /status tells
            # them apart (401 for the token; the older corral's answer has no version)
            self.status()
        # an agent says its version with either answer; a 503 without one is not known to
        # come from the agent at all (a proxy's): not ready yet, no verdict on the version
        if ready or "wire_version" in body:
            check_version(body.get("wire_version"), who=f"agent at {self.endpoint}")
        return ready

    def status(self) -> AgentStatus:
        return self._answer(AgentStatus, "/status", "status")

    def gpus(self) -> dict[str, Any]:
        """``GET /gpus``: what each GPU of the attempt reads (an older agent answers 404:
        :class:`~corral.errors.AgentError`)."""
        return self._request("GET", "/gpus")

    def poll(
        self,
        events_after: int = 0,
        offsets: dict[str, int] | None = None,
        log_limit: int = DEFAULT_LOG_LIMIT,
    ) -> PollAnswer:
        """``GET /poll``: the status, the events after ``events_after`` and each stage log's
        bytes past ``offsets`` in one request (:mod:`corral.wire.poll`)."""
        params: dict[str, Any] = {"events_after": events_after, "log_limit": log_limit}
        if offsets:
            params["logs"] = encode_offsets(offsets)
        return self._answer(PollAnswer, "/poll", "poll answer", params=params)

    def events(self, after: int = 0) -> EventsPage:
        """``GET /events?after=N``: a page of events and the cursor to ask with next."""
        return self._answer(EventsPage, "/events", "events page", params={"after": after})

    def log_sizes(self) -> dict[str, int]:
        return self._answer(LogSizes, "/logs", "log sizes").stages

    def logs(self, stage: str, offset: int = 0, limit: int = 256 * 1024) -> StageLogChunk:
        """``GET /logs?stage=S``: the stage log's bytes from ``offset``."""
        params = {"stage": stage, "offset": offset, "limit": limit}
        return self._answer(StageLogChunk, "/logs", "log chunk", params=params)

    def put_code(self, sha256: str, offset: int, data: bytes) -> dict[str, Any]:
        """Send bytes ``offset..offset+len(data)`` of the code bundle ``sha256`` (``PUT
        /code/<sha256>``); the answer says how many bytes the agent has."""
        return self._request(
            "PUT",
            f"/code/{sha256}",
            params={"offset": offset},
            content=data,
            timeout=UPLOAD_TIMEOUT,
        )

    def code(self) -> dict[str, Any]:
        """``GET /code``: where the attempt's code stands."""
        return self._request("GET", "/code")

    def stop(self, cause: StopCause = StopCause.USER, reason: str = "") -> dict[str, Any]:
        """Ask for a graceful stop, saying why (the attempt's outcome carries ``cause``)."""
        body: dict[str, Any] = {"cause": cause.value}
        if reason:
            body["reason"] = reason
        return self._request("POST", "/stop", json=body)

    def start_gang(self, nodes: list[NodeAttempt] | None = None) -> dict[str, Any]:
        """Every node of the gang is there: the node's stages on several nodes may start
        (``POST /gang/start``; idempotent); ``nodes``: the gang's nodes in every attempt so
        far, for the manifest."""
        body = GangStart(nodes=list(nodes or ()))
        return self._request("POST", "/gang/start", json=body.model_dump(mode="json"))

    def hand_over(self, plan: AgentPlan, token: str, gang: GangRole | None) -> dict[str, Any]:
        """Give the node the run's next attempt (``POST /attempt``: a gang's node kept through
        a repair); its ended attempt must be this client's."""
        body = {
            "plan": plan.model_dump(mode="json"),
            "token": token,
            "gang": gang.model_dump(mode="json") if gang is not None else None,
        }
        return self._request("POST", "/attempt", json=body)

    # --- a way in: commands and packaged results (corral exec, corral download) -----------

    def exec_start(self, argv: list[str], timeout_s: float | None = None) -> str:
        """Start ``argv`` on the node (``POST /exec``); returns the command's id."""
        body: dict[str, Any] = {"argv": list(argv)}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        answer = self._call("POST", "/exec", json=body)
        return str(answer["id"])

    def exec_read(self, command_id: str, offset: int = 0) -> dict[str, Any]:
        """Output of the command from ``offset`` (``data``, ``next_offset``) and, once it
        ended and all was read, ``done`` and ``exit_code``."""
        return self._call("GET", f"/exec/{command_id}", params={"offset": offset})

    def exec_kill(self, command_id: str) -> None:
        self._call("POST", f"/exec/{command_id}/kill")

    def _call(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """Like :meth:`_request`, but an agent's own refusal (4xx with ``{"error"}``) is an
        AgentError carrying the agent's words."""
        url = self.endpoint + path
        try:
            status, content = self._client.request(
                method,
                url,
                self._headers,
                self._timeout,
                params=kw.get("params"),
                body=kw.get("json"),
            )
        except TransportError as e:
            raise AgentUnreachable(f"agent at {self.endpoint} unreachable: {e.what}") from None
        if status == 401:
            raise AgentError(f"agent at {self.endpoint} rejected the controller's token")
        try:
            body = json.loads(content)
        except ValueError:
            body = None
        if status >= 400:
            said = body.get("error") if isinstance(body, dict) else None
            if status in (404, 405) and said in (None, "not found"):
                raise AgentError(
                    f"agent at {self.endpoint} does not serve {path.split('?')[0]} "
                    "(an older corral on the node?)"
                )
            raise AgentError(f"agent: {said or f'HTTP {status}'}", fields={"status": status})
        if not isinstance(body, dict):
            raise AgentError(f"agent at {self.endpoint} sent a non-JSON answer on {path}")
        return body

    def download(
        self,
        name: str,
        dest: Any,
        chunk: int = 1024 * 1024,
        on_progress: Any = None,
    ) -> int | None:
        """Stream ``GET /artifacts/<name>`` into the open binary file ``dest``; the bytes
        written, or None when the agent has not packaged it (yet). ``on_progress(done,
        total)`` is told after every chunk (``total``: the announced length, or None)."""
        url = f"{self.endpoint}/artifacts/{name}"
        try:  # a stream of its own (not the controller's pool): a download is a CLI's errand
            with httpx.stream(
                "GET", url, headers=self._headers, timeout=max(self._timeout, 60.0)
            ) as resp:
                if resp.status_code == 404:
                    return None
                if resp.status_code == 401:
                    raise AgentError(f"agent at {self.endpoint} rejected the controller's token")
                if resp.status_code != 200:
                    raise AgentError(f"agent at {self.endpoint} answered {resp.status_code}")
                length = resp.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                written = 0
                for data in resp.iter_bytes(chunk):
                    dest.write(data)
                    written += len(data)
                    if on_progress is not None:
                        on_progress(written, total)
                return written
        except httpx.HTTPError as e:
            raise AgentUnreachable(
                f"agent at {self.endpoint} unreachable: {type(e).__name__}"
            ) from e


class AgentPool:
    """One connection pool shared by the clients of every agent a controller polls (the lean
    transport by default; ``http``: an ``httpx.Client`` to use instead). :meth:`close`
    closes it; the clients it made are unusable afterwards."""

    def __init__(
        self, http: httpx.Client | Transport | None = None, *, timeout: float = DEFAULT_TIMEOUT
    ):
        self._timeout = timeout
        self._http: Transport = _transport(http) if http is not None else default_transport(timeout)

    def client(self, endpoint: str, token: str) -> AgentClient:
        """A client of the agent at ``endpoint`` that borrows the pool."""
        return AgentClient(endpoint, token, timeout=self._timeout, client=self._http)

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    def close(self) -> None:
        self._http.close()
