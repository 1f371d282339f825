"""A fake SaladCloud on 127.0.0.1 bound to SaladCloud's published documents.

* ``/api/public/organizations/{org}/...``: GPU classes (prices as strings), container groups
  (create 201 with ``Location``, get, list by pages of at most 100 (``page``,
  ``page_size``), start/stop/delete 202 with an empty body), instances and their
  ``reallocate`` action, system logs, log entries. Errors are ProblemDetails.
* **The contract**: every request under ``/api/public`` is checked against
  ``contracts/salad-cloud.yaml`` (:attr:`FakeSalad.contract`) before the fake sees it; one
  the real API would refuse gets a 400 ProblemDetails naming the first violation, and every
  answer is checked too. The metadata service is checked against
  ``contracts/salad-cloud-imds.yaml`` (:attr:`FakeSalad.imds_contract`) the same way.
  :meth:`FakeSalad.close` fails (``AssertionError``) when any exchange broke either, so every
  test that uses the fake fails on a violation. Faults a test asks for are not checked. What
  no document settles (a probe has exactly one kind; a taken name is a 409; the list's
  paging) is in ``docs/providers.md``, "Assumptions no published contract settles".
* ``Salad-Api-Key`` required (401 otherwise); **240 requests a minute per key** (a sliding
  window; 429 ProblemDetails, with ``Retry-After`` only if ``retry_after`` is set, as
  SaladCloud documents none). ``peak_per_min`` is the most requests seen in any minute.
* Faults on request (:meth:`FakeSalad.fail`): any status, an HTML page instead of JSON
  (``html=True``), ``after=True`` to apply the request first.
* The container gateway at ``/gw/<dns>/...`` (``networking.dns`` is ``<group>.salad.test``, a
  host name as the document requires; clients set ``gateway_url`` to
  ``http://127.0.0.1:<port>/gw/{dns}``) forwards to the running replica; an HTML 502 before
  it runs. The readiness probe is called every
  ``probe_every`` seconds and sets the instance's ``ready``.
* The per-container metadata service at ``/imds/<group>/v1/...`` (``Metadata: true``
  required): ``status``, ``deletion-cost``; its errors are ``application/problem+json``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from support import fakehttp
from support.containers import Forwarder
from support.openapi_contract import ContractCheck, Exchange, load, unchecked

from .fake_cloud import ORG, PROJECT, CloudError, FakeSaladCloud, now_iso

API_KEY = "salad_FAKE_0123456789abcdef_secretkey"
HTML_PAGE = (
    b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>502 Bad Gateway</h1><hr><center>cloudflare</center></body></html>"
)
#: the most container groups one page of the list holds (the document's ``maxItems``)
PAGE_MAX = 100
_PROBE_KINDS = ("http", "tcp", "grpc", "exec")


def problem(status: int, title: str, detail: str = "") -> dict[str, Any]:
    """SaladCloud's ProblemDetails (``detail`` cut to the document's 2,000 characters)."""
    return {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": (detail or title)[:2000],
    }


def _refuse(violations: list[str]) -> tuple[int, Any]:
    """What SaladCloud answers a request its schema refuses: 400 ProblemDetails."""
    return 400, problem(400, "Bad Request", violations[0])


def _refuse_imds(violations: list[str]) -> tuple[int, Any]:
    """The metadata service's refusal: 400 with its own error shape."""
    return 400, {"code": "bad-request", "detail": violations[0][:10000]}


@dataclass
class Fault(fakehttp.Fault):
    """Answer the next ``times`` requests matching ``target`` (fnmatch on ``METHOD /path``
    below ``/api/public``) with ``status``; ``html``: an HTML page as the body."""

    html: bool = False
    detail: str = "injected fault"


@dataclass
class Seen:
    ts: float
    method: str
    route: str
    status: int


class FakeSalad:
    def __init__(
        self,
        root: Path,
        *,
        api_key: str = API_KEY,
        limit_per_min: int = 240,
        retry_after: float | None = None,
        step: float = 0.1,
        probe_every: float = 0.2,
        clock: Any = time.monotonic,
    ):
        self.api_key = api_key
        self.cloud = FakeSaladCloud(root, step=step)
        self.limit_per_min = limit_per_min
        self.retry_after = retry_after
        self.clock = clock
        self.faults: fakehttp.Faults[Fault] = fakehttp.Faults()
        self.seen: list[Seen] = []
        self.creates: list[dict[str, Any]] = []
        self.imds_calls: list[tuple[str, str, str]] = []
        #: the public API's contract (checked by support.fakehttp for every request under it)
        self.contract = ContractCheck(load("salad-cloud.yaml"), "/api/public", _refuse)
        #: the metadata service's contract (checked here: its prefix holds the group's name)
        self.imds_contract = ContractCheck(load("salad-cloud-imds.yaml"), "/imds/", _refuse_imds)
        self._window: deque[float] = deque()
        self.peak_per_min = 0
        self._lock = threading.Lock()
        self._forward = Forwarder()
        self.server = fakehttp.start_server(self, _Handler)
        self._stop = threading.Event()
        self.probe_every = probe_every
        threading.Thread(target=self._prober, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def settings(self) -> dict[str, Any]:
        """The SaladSettings fields that point a client at this server."""
        return {
            "api_url": self.base_url + "/api/public",
            "organization": ORG,
            "project": PROJECT,
            "gateway_url": self.base_url + "/gw/{dns}",
        }

    def env(self) -> dict[str, str]:
        """The same, as a controller's environment."""
        return {f"CORRAL_SALAD_{k.upper()}": str(v) for k, v in self.settings().items()}

    def violations(self) -> list[str]:
        """Every exchange so far that broke either published document."""
        return [*self.contract.violations, *self.imds_contract.violations]

    def assert_clean(self) -> None:
        """Fail when any exchange broke SaladCloud's API or metadata service document."""
        self.contract.assert_clean()
        self.imds_contract.assert_clean()

    def close(self, *, check: bool = True) -> None:
        """Stop the server and every container; then, with ``check``, :meth:`assert_clean`."""
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.cloud.close()
        self._forward.close()
        if check:
            self.assert_clean()

    def fail(self, target: str, status: int = 500, **kw: Any) -> Fault:
        return self.faults.add(Fault(target, status, **kw))

    def interrupt(self, name: str) -> None:
        self.cloud.interrupt(name)

    def routes(self, prefix: str = "") -> list[str]:
        return [s.route for s in self.seen if s.route.startswith(prefix)]

    # --- the readiness probe ----------------------------------------------------------------

    def _prober(self) -> None:
        while not self._stop.wait(self.probe_every):
            with self.cloud.lock:
                targets = [
                    (g, g.replica, (g.body.get("readiness_probe") or {}).get("http"))
                    for g in self.cloud.groups.values()
                    if g.replica is not None and g.replica.state == "running"
                ]
            for group, replica, http in targets:
                port = self.cloud.replica_port(group.name)
                ok = False
                if http and port:
                    answer = self._forward.forward("GET", port, http["path"], b"", {})
                    ok = answer is not None and answer[0] == 200
                replica.ready = ok if http else port is not None

    # --- dispatch -----------------------------------------------------------------------------

    def _count(self, now: float) -> bool:
        """Record a request; False if it is over the limit."""
        with self._lock:
            while self._window and self._window[0] <= now - 60.0:
                self._window.popleft()
            if len(self._window) >= self.limit_per_min:
                return False
            self._window.append(now)
            self.peak_per_min = max(self.peak_per_min, len(self._window))
            return True

    def handle(self, h: _Handler) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        parts = url.path.strip("/").split("/")
        if parts[0] == "gw" and len(parts) >= 2:
            return self._gateway(h, parts[1], "/" + "/".join(parts[2:]), url.query, raw)
        if parts[0] == "imds" and len(parts) >= 2:
            return self._imds(h, parts[1], "/" + "/".join(parts[2:]), url.query, raw)
        if url.path.startswith("/api/public/"):
            route = f"{h.command} {url.path[len('/api/public') :]}"
        else:
            return self._problem(h, "?", 404, "Not Found")
        if h.headers.get("Salad-Api-Key") != self.api_key:
            return self._problem(h, route, 401, "Unauthorized", "a valid Salad-Api-Key is required")
        if not self._count(self.clock()):
            headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after else {}
            return self._problem(h, route, 429, "Too Many Requests", "rate limit", headers)
        fault = self.faults.take(route)
        if fault is not None and not fault.after:
            return self._fault(h, route, fault)
        try:
            body = json.loads(raw) if raw else None
            if parts[2:3] != ["organizations"]:
                raise CloudError(404, "Not Found", "no such resource")
            query = dict(parse_qsl(url.query))
            status, answer, headers = self._api(h.command, parts[3:], body, query)
        except CloudError as exc:
            return self._problem(h, route, exc.status, exc.title, exc.detail)
        if fault is not None:
            return self._fault(h, route, fault)
        self._send(h, route, status, answer, headers=headers)

    def _api(
        self, method: str, p: list[str], body: Any, query: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        cloud = self.cloud
        if not p or p[0] != ORG:
            raise CloudError(404, "Not Found", "no such organization")
        rest = p[1:]
        if rest == ["gpu-classes"] and method == "GET":
            return 200, {"items": cloud.classes}, {}
        if rest == ["log-entries"] and method == "POST":
            return 200, self._log_entries(body), {}
        if len(rest) < 3 or rest[0] != "projects" or rest[1] != PROJECT or rest[2] != "containers":
            raise CloudError(404, "Not Found", "no such resource")
        rest = rest[3:]
        if not rest:
            if method == "GET":
                return 200, {"items": self._page(query)}, {}
            if method == "POST":
                _check_probes(body)
                self.creates.append(body)
                imds = f"{self.base_url}/imds/{body['name']}"
                group = cloud.create(body, imds)
                where = f"/organizations/{ORG}/projects/{PROJECT}/containers/{group.name}"
                return 201, group.api(), {"Location": where}
        name = rest[0]
        if len(rest) == 1:
            if method == "GET":
                return 200, cloud.get(name).api(), {}
            if method == "DELETE":
                cloud.delete(name)
                return 202, None, {}
        if len(rest) == 2 and method == "POST" and rest[1] in ("start", "stop"):
            (cloud.start if rest[1] == "start" else cloud.stop)(name)
            return 202, None, {}
        if len(rest) == 2 and method == "GET" and rest[1] == "instances":
            group = cloud.get(name)
            with cloud.lock:
                replica = group.replica
                items = [replica.api(group.version)] if replica else []
            return 200, {"instances": items}, {}
        if len(rest) == 2 and method == "GET" and rest[1] == "system-logs":
            return 200, {"items": cloud.get(name).system_logs()}, {}
        if len(rest) == 4 and rest[1] == "instances" and method == "POST":
            group = cloud.get(name)
            if group.replica is None or group.replica.id != rest[2]:
                raise CloudError(404, "Not Found", "The instance could not be found.")
            if rest[3] == "reallocate":
                cloud.interrupt(name, "Instance Reallocated by User")
                return 202, None, {}
        raise CloudError(404, "Not Found", f"no route {method} {'/'.join(p)}")

    def _page(self, query: dict[str, str]) -> list[dict[str, Any]]:
        """One page of the project's groups, oldest first: ``page`` (from 1) of ``page_size``
        (at most, and by default, :data:`PAGE_MAX`). UNCONFIRMED upstream: the document
        declares no paging on this list, only at most 100 items and "a paginated collection";
        the parameters are those of its other lists."""
        try:
            page = int(query.get("page") or 1)
            size = int(query.get("page_size") or PAGE_MAX)
        except ValueError:
            raise CloudError(400, "Bad Request", "page and page_size are integers") from None
        if page < 1 or not 1 <= size <= PAGE_MAX:
            raise CloudError(400, "Bad Request", f"page >= 1, page_size 1-{PAGE_MAX}")
        with self.cloud.lock:
            groups = list(self.cloud.groups.values())
            return [g.api() for g in groups[(page - 1) * size : page * size]]

    def _log_entries(self, body: Any) -> dict[str, Any]:
        m = re.search(r'container_group_name = "([^"]+)"', body["query"])
        items = []
        if m:
            with self.cloud.lock:
                group = self.cloud.groups.get(m.group(1))
                text = "".join(c.log() for c in group.containers) if group else ""
            for line in text.splitlines():
                items.append(
                    {
                        "time": now_iso(),
                        "receive_time": now_iso(),
                        "severity": "info",
                        "text_log": line[:10000],
                        "resource": {
                            "type": "container",
                            "labels": {"container_group_name": m.group(1)},
                        },
                    }
                )
        items.reverse()  # newest first
        return {
            "organization_name": ORG,
            "page_min_time": body["start_time"],
            "page_max_time": body["end_time"],
            "items": items[: int(body.get("page_size") or 100)],
        }

    def _gateway(self, h: _Handler, dns: str, path: str, query: str, raw: bytes) -> None:
        route = f"gw {h.command} {path}"
        port = self.cloud.replica_port(self.cloud.by_dns(dns))
        if port is None:
            return self._send(h, route, 502, HTML_PAGE, "text/html")
        target = path + (f"?{query}" if query else "")
        answer = self._forward.forward(h.command, port, target, raw, dict(h.headers.items()))
        if answer is None:
            return self._send(h, route, 502, HTML_PAGE, "text/html")
        status, content, kind = answer
        self._send(h, route, status, content, kind or "application/octet-stream")

    def _imds(self, h: _Handler, name: str, path: str, query: str, raw: bytes) -> None:
        route = f"imds {h.command} {path}"
        self.imds_calls.append((name, h.command, path))
        check = self.imds_contract
        headers = dict(h.headers.items())
        refused = check.record(check.contract.check_request(h.command, path, query, headers, raw))
        if refused:
            status, body = check.refuse(refused)
            return self._send(h, route, status, body, "application/problem+json")
        h.exchange = Exchange(check, h.command, path, query)  # its answer is checked too
        with self.cloud.lock:
            group = self.cloud.groups.get(name)
        if group is None:
            return self._imds_error(h, route, 404, "container-not-found")
        if h.command == "GET" and path == "/v1/status":
            replica = group.replica
            return self._send(
                h, route, 200, {"ready": bool(replica and replica.ready), "started": True}
            )
        if h.command == "PUT" and path == "/v1/deletion-cost":
            group.deletion_costs.append(int(json.loads(raw)["deletion_cost"]))
            return self._send(h, route, 204, None)
        return self._imds_error(h, route, 404, "not-found")

    def _imds_error(self, h: _Handler, route: str, status: int, code: str) -> None:
        body = {"code": code, "detail": f"{code} ({route})"}
        self._send(h, route, status, body, "application/problem+json")

    # --- answers ------------------------------------------------------------------------------

    def _fault(self, h: _Handler, route: str, fault: Fault) -> None:
        unchecked(h)  # a fault the test asked for: its shape is the test's business
        headers = fault.headers()
        if fault.html:
            return self._send(h, route, fault.status, HTML_PAGE, "text/html", headers)
        self._problem(h, route, fault.status, "Error", fault.detail, headers)

    def _problem(
        self,
        h: _Handler,
        route: str,
        status: int,
        title: str,
        detail: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        """A ProblemDetails answer (``application/json``, as the document types every error)."""
        self._send(h, route, status, problem(status, title, detail), "application/json", headers)

    def _send(
        self,
        h: _Handler,
        route: str,
        status: int,
        body: Any,
        kind: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.seen.append(Seen(self.clock(), h.command, route, status))
        fakehttp.send(h, status, body, kind, headers, content_type="with-body")


def _check_probes(body: dict[str, Any]) -> None:
    """What SaladCloud checks on a create that its document does not say: a probe has exactly
    one of ``http``, ``tcp``, ``grpc``, ``exec`` (SaladCloud's probe docs; the schema makes
    each optional). 400 ProblemDetails otherwise."""
    for name in ("startup_probe", "liveness_probe", "readiness_probe"):
        probe = body.get(name)
        if probe is None:
            continue
        kinds = [k for k in _PROBE_KINDS if probe.get(k) is not None]
        if len(kinds) != 1:
            raise CloudError(
                400, "Bad Request", f"{name} must have exactly one of http, tcp, grpc, exec"
            )


class _Handler(fakehttp.QuietHandler):
    """HEAD too goes to the fake."""

    fake: FakeSalad

    do_HEAD = fakehttp.QuietHandler.do_GET
