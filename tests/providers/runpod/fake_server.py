"""A fake RunPod on 127.0.0.1 that speaks the contract in ``shared/providers/runpod.md``.

* REST v2 under ``/v2`` (:mod:`.fake_rest_v2`): pods (create 201, list wrapped as
  ``{"pods": [...]}`` with no name filter, get, ``POST /pods/{id}/action`` with 409 for an
  action the status does not allow, delete 204, 404 for an unknown pod), network volumes, the
  GPU catalog; errors are RFC 9457 problem details (``application/problem+json``), 422 for a
  body that breaks the schema, 400 for no capacity; ``RateLimit`` and ``RateLimit-Policy``
  headers on every answer, 429 with ``Retry-After`` past the minute quota.
* A pod's log at ``GET /v2/pods/{id}/logs`` (:mod:`.fake_logs`): Server-Sent Events of what
  the pod's container really printed, following it and staying open (``fake.logs`` sets how
  long, and what noise or cut a test wants); 404 for an unknown pod and, while
  ``fake.rest.log_404_before_start``, for a pod whose container has not started.
* REST v1 (``/v1``) is retired: 410 to anything (and recorded, so a test can tell it was hit).
* GraphQL at ``/graphql`` (:mod:`.fake_graphql`): always HTTP 200 with data or errors; spot
  pods and spot prices only while ``fake.cloud.spot_sold``.
* The CDN: a request without a User-Agent, or with a default library one (Python-urllib,
  python-requests, python-httpx), gets 403 ``error code: 1010``; a wrong or missing key 401.
* RunPod's HTTP proxy at ``/proxy/<pod-id>-<port>/...``: forwards to the pod's container
  (the agent) once it runs; 502 before.
* Faults on request (:meth:`FakeRunPod.fail`): any status (429 with ``Retry-After``, 500,
  503...), a delayed answer (a client timeout), and ``after=True`` to apply the request
  first and answer with the fault anyway: RunPod's "500, but the pod was created".
* Spot interruptions on request (:meth:`FakeRunPod.interrupt`) and capacity per GPU type and
  cloud (``fake.cloud.gpus[...].capacity``): a create beyond it is 400 "There are no longer
  any instances available...".

Pods run their start command on this machine (:mod:`.fake_cloud`), so corral's agent really
starts inside each "pod" and is reached through the proxy like on RunPod.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from support import fakehttp
from support.fakehttp import QuietHandler
from support.openapi_contract import ContractCheck, load, unchecked

from . import fake_graphql, fake_logs, fake_rest_v2
from .fake_cloud import FakeCloud, GpuKind

API_KEY = "rpa_FAKE0123456789ABCDEFsecretkey"
_DEFAULT_AGENTS = ("python-urllib", "python-requests", "python-httpx")
_PROXY = re.compile(r"^/proxy/([A-Za-z0-9]+)-(\d+)(/.*)?$")
_LOGS = re.compile(r"^/v2/pods/([^/]+)/logs/?$")


@dataclass
class Fault(fakehttp.Fault):
    """Answer the next ``times`` requests matching ``target`` with ``status``.

    ``target``: ``"POST /v2/pods"``, ``"GET /v2/pods/*"`` (fnmatch on ``METHOD /path``) or
    ``"graphql:<field>"``. ``after``: apply the request first. ``delay``: wait
    this long before answering (longer than the client's timeout: a timeout)."""

    body: Any = None
    delay: float = 0.0


def _refuse(violations: list[str]) -> tuple[int, Any]:
    """What REST v2 answers a request that breaks its document: 404 for a path it does not
    have, else 422 with one line per violation (``ErrorResponse``)."""
    if any("PathNotFound" in v for v in violations):
        return 404, fake_rest_v2.problem(404, "no such route")
    return 422, fake_rest_v2.problem(422, "request validation failed", violations)


@dataclass
class Seen:
    method: str
    route: str
    user_agent: str
    status: int


class FakeRunPod:
    def __init__(
        self,
        root: Path,
        *,
        api_key: str = API_KEY,
        gpus: list[GpuKind] | None = None,
        boot_delay: float = 0.2,
        stop_grace_s: float = 5.0,
    ):
        self.api_key = api_key
        self.cloud = FakeCloud(
            root, api_key, gpus=gpus, boot_delay=boot_delay, stop_grace_s=stop_grace_s
        )
        self.faults: fakehttp.Faults[Fault] = fakehttp.Faults()
        self.seen: list[Seen] = []
        #: bodies of REST creates and inputs of GraphQL creates, in order
        self.creates: list[dict[str, Any]] = []
        self.rest = fake_rest_v2.RestV2(self.cloud, self.creates)
        #: how pod log streams behave (hold, keep-alives, noise, cuts)
        self.logs = fake_logs.LogStream()
        self._proxy = httpx.Client(timeout=30.0)
        #: RunPod's published REST v2 document (its paths start with /v2, its server has no
        #: base path): every exchange under /v2 is checked against it. What else the fake
        #: serves is not REST v2 (GraphQL, RunPod's HTTP proxy, the retired v1).
        self.contract = ContractCheck(
            load("runpod-v2.json"),
            "",
            refuse=_refuse,
            exempt=("/graphql", "/proxy/", "/v1/"),
            refuse_kind=fake_rest_v2.PROBLEM,
        )
        self.server = fakehttp.start_server(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def settings(self) -> dict[str, str]:
        """The RunPodSettings fields that point a client at this server."""
        return {
            "rest_url": self.base_url + "/v2",
            "graphql_url": self.base_url + "/graphql",
            "proxy_url": self.base_url + "/proxy/{pod_id}-{port}",
        }

    def close(self) -> None:
        self.logs.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.cloud.close()
        self._proxy.close()

    # --- what tests call ----------------------------------------------------------------------

    def fail(self, target: str, status: int = 500, **kw: Any) -> Fault:
        return self.faults.add(Fault(target, status, **kw))

    def interrupt(self, pod_id: str, notice: float = 5.0) -> None:
        self.cloud.interrupt(pod_id, notice)

    def pod_key(self, pod_id: str) -> str:
        """The pod-scoped key of ``pod_id`` (:meth:`FakeCloud.pod_key`)."""
        return self.cloud.pod_key(pod_id)

    def _pod_scoped(self, auth: str) -> str | None:
        """The pod whose pod-scoped key ``auth`` carries, if it does."""
        m = re.fullmatch(r"Bearer rpa_POD([0-9a-f]+)" + re.escape(self.api_key[-12:]), auth)
        return m.group(1) if m else None

    def routes(self, prefix: str = "") -> list[str]:
        return [s.route for s in self.seen if s.route.startswith(prefix)]

    # --- dispatch -----------------------------------------------------------------------------

    def handle(self, h: QuietHandler) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        ua = h.headers.get("User-Agent", "")
        if not ua.strip() or ua.lower().startswith(_DEFAULT_AGENTS):
            unchecked(h)  # the CDN's answer, not the API's
            return self._send(h, "CDN", ua, 403, b"error code: 1010", "text/plain")
        m = _PROXY.match(url.path)
        if m:
            return self._forward(h, m, url.query, raw, ua)
        query = parse_qs(url.query)
        auth = h.headers.get("Authorization", "")
        scoped = self._pod_scoped(auth)  # a pod's own key: on the pod itself only
        if scoped is not None and url.path.rstrip("/") != f"/v2/pods/{scoped}":
            problem = fake_rest_v2.problem(403, "access denied")
            return self._send(h, "auth", ua, 403, problem, fake_rest_v2.PROBLEM)
        if (
            scoped is None
            and auth != f"Bearer {self.api_key}"
            and (query.get("api_key") != [self.api_key])
        ):
            if url.path.startswith("/v2/"):
                problem = fake_rest_v2.problem(401, "invalid or missing API key")
                return self._send(h, "auth", ua, 401, problem, fake_rest_v2.PROBLEM)
            return self._send(h, "auth", ua, 401, {"message": "Unauthorized: bad API key"})
        if url.path == "/graphql" and h.command == "POST":
            return self._graphql(h, raw, ua)
        route = f"{h.command} {url.path}"
        if url.path.startswith("/v1/"):
            return self._send(h, route, ua, 410, {"message": fake_rest_v2.V1_RETIRED})
        if not url.path.startswith("/v2/"):
            return self._send(h, route, ua, 404, {"message": "not found"})
        fault = self.faults.take(route)
        if fault is not None and not fault.after:
            return self._fault(h, route, ua, fault)
        log = _LOGS.match(url.path) if h.command == "GET" else None
        if log is not None:
            return self._log(h, route, ua, log.group(1))
        status, answer, headers = self.rest.handle(h.command, url.path[3:], query, raw)
        if fault is not None:
            return self._fault(h, route, ua, fault)
        kind = fake_rest_v2.PROBLEM if status >= 400 else "application/json"
        self._send(h, route, ua, status, answer, kind, headers)

    def _log(self, h: QuietHandler, route: str, ua: str, pod_id: str) -> None:
        status, problem, headers, path = self.rest.open_log(pod_id)
        if status != 200:
            return self._send(h, route, ua, status, problem, fake_rest_v2.PROBLEM, headers)
        self.seen.append(Seen(h.command, route, ua, 200))

        def alive() -> bool:
            with self.cloud.lock:
                return pod_id in self.cloud.pods

        self.logs.serve(h, path, headers, alive)

    def _graphql(self, h: QuietHandler, raw: bytes, ua: str) -> None:
        try:
            doc = json.loads(raw)
            query, variables = str(doc["query"]), doc.get("variables") or {}
            field = fake_graphql.parse(query, variables)[1]
        except (ValueError, KeyError, TypeError, fake_graphql.GraphQLError) as exc:
            return self._send(h, "graphql:?", ua, 400, {"errors": [{"message": str(exc)}]})
        route = "graphql:" + field
        fault = self.faults.take(route)
        if fault is not None and not fault.after:
            return self._fault(h, route, ua, fault)
        if field in ("podRentInterruptable", "podFindAndDeployOnDemand"):
            self.creates.append(fake_graphql.parse(query, variables)[2].get("input") or {})
        answer = fake_graphql.resolve(self.cloud, query, variables)
        if fault is not None:
            return self._fault(h, route, ua, fault)
        self._send(h, route, ua, 200, answer)

    def _forward(self, h: QuietHandler, m: re.Match, query: str, raw: bytes, ua: str) -> None:
        route = f"proxy {h.command} {m.group(3) or '/'}"
        with self.cloud.lock:
            pod = self.cloud.pods.get(m.group(1))
            local = pod.local_ports.get(int(m.group(2))) if pod and pod.running() else None
        if pod is None:
            return self._send(h, route, ua, 404, b"404 page not found", "text/plain")
        if local is None:
            return self._send(h, route, ua, 502, b"502 Bad Gateway", "text/plain")
        url = f"http://127.0.0.1:{local}{m.group(3) or '/'}" + (f"?{query}" if query else "")
        headers = {
            k: v for k, v in h.headers.items() if k.lower() in ("authorization", "content-type")
        }
        try:
            resp = self._proxy.request(h.command, url, content=raw, headers=headers)
        except httpx.HTTPError:
            return self._send(h, route, ua, 502, b"502 Bad Gateway", "text/plain")
        kind = resp.headers.get("Content-Type", "application/octet-stream")
        self._send(h, route, ua, resp.status_code, resp.content, kind)

    # --- answers ------------------------------------------------------------------------------

    def _fault(self, h: QuietHandler, route: str, ua: str, fault: Fault) -> None:
        unchecked(h)  # a fault the test asked for: its shape is the test's
        if fault.delay:
            time.sleep(fault.delay)
        body = fault.body
        kind = "application/json"
        if body is None and route.startswith("graphql:"):
            body = {"message": {429: "rate limit exceeded"}.get(fault.status, "Internal error")}
        elif body is None:
            detail = {429: "rate limit exceeded for the minute window"}.get(
                fault.status, "internal error"
            )
            body, kind = fake_rest_v2.problem(fault.status, detail), fake_rest_v2.PROBLEM
        self._send(h, route, ua, fault.status, body, kind, headers=fault.headers())

    def _send(
        self,
        h: QuietHandler,
        route: str,
        ua: str,
        status: int,
        body: Any,
        kind: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.seen.append(Seen(h.command, route, ua, status))
        fakehttp.send(h, status, body, kind, headers, content_type="unless-204")
