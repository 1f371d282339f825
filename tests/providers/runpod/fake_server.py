"""A fake RunPod on 127.0.0.1 that speaks the contract in ``shared/providers/runpod.md``.

* REST v1 under ``/v1``: pods (create 201, list as a bare array with a ``name`` filter, get,
  stop, start, delete 204; an unknown pod is 404 on GET and 400 "pod not found to terminate"
  on DELETE) and network volumes; errors are ``{"message": ...}``.
* GraphQL at ``/graphql`` (:mod:`.fake_graphql`): always HTTP 200 with data or errors.
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

import fnmatch
import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from . import fake_graphql
from .fake_cloud import CloudError, FakeCloud, GpuKind

API_KEY = "rpa_FAKE0123456789ABCDEFsecretkey"
_DEFAULT_AGENTS = ("python-urllib", "python-requests", "python-httpx")
_PROXY = re.compile(r"^/proxy/([A-Za-z0-9]+)-(\d+)(/.*)?$")


@dataclass
class Fault:
    """Answer the next ``times`` requests matching ``target`` with ``status``.

    ``target``: ``"POST /pods"``, ``"GET /pods/*"`` (fnmatch on ``METHOD /path`` without
    ``/v1``) or ``"graphql:<field>"``. ``after``: apply the request first. ``delay``: wait
    this long before answering (longer than the client's timeout: a timeout)."""

    target: str
    status: int = 500
    body: Any = None
    retry_after: float | None = None
    delay: float = 0.0
    after: bool = False
    times: int = 1


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
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        #: bodies of REST creates and inputs of GraphQL creates, in order
        self.creates: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._proxy = httpx.Client(timeout=30.0)
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def settings(self) -> dict[str, str]:
        """The RunPodSettings fields that point a client at this server."""
        return {
            "rest_url": self.base_url + "/v1",
            "graphql_url": self.base_url + "/graphql",
            "proxy_url": self.base_url + "/proxy/{pod_id}-{port}",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.cloud.close()
        self._proxy.close()

    # --- what tests call ----------------------------------------------------------------------

    def fail(self, target: str, status: int = 500, **kw: Any) -> Fault:
        fault = Fault(target, status, **kw)
        with self._lock:
            self.faults.append(fault)
        return fault

    def interrupt(self, pod_id: str, notice: float = 5.0) -> None:
        self.cloud.interrupt(pod_id, notice)

    def routes(self, prefix: str = "") -> list[str]:
        return [s.route for s in self.seen if s.route.startswith(prefix)]

    # --- dispatch -----------------------------------------------------------------------------

    def _take_fault(self, route: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fnmatch.fnmatchcase(route, fault.target):
                    fault.times -= 1
                    return fault
        return None

    def handle(self, h: _Handler) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        ua = h.headers.get("User-Agent", "")
        if not ua.strip() or ua.lower().startswith(_DEFAULT_AGENTS):
            return self._send(h, "CDN", ua, 403, b"error code: 1010", "text/plain")
        m = _PROXY.match(url.path)
        if m:
            return self._forward(h, m, url.query, raw, ua)
        query = parse_qs(url.query)
        auth = h.headers.get("Authorization", "")
        if auth != f"Bearer {self.api_key}" and query.get("api_key") != [self.api_key]:
            return self._send(h, "auth", ua, 401, {"message": "Unauthorized: bad API key"})
        if url.path == "/graphql" and h.command == "POST":
            return self._graphql(h, raw, ua)
        if not url.path.startswith("/v1/"):
            return self._send(h, h.command + " " + url.path, ua, 404, {"message": "not found"})
        route = f"{h.command} {url.path[3:]}"
        fault = self._take_fault(route)
        if fault is not None and not fault.after:
            return self._fault(h, route, ua, fault)
        try:
            body = json.loads(raw) if raw else None
            status, answer = self._rest(h.command, url.path[3:], query, body)
        except CloudError as exc:
            status, answer = exc.status, {"message": exc.message}
        except (ValueError, KeyError, TypeError) as exc:
            status, answer = 400, {"message": f"invalid input: {exc}"}
        if fault is not None:
            return self._fault(h, route, ua, fault)
        self._send(h, route, ua, status, answer)

    def _graphql(self, h: _Handler, raw: bytes, ua: str) -> None:
        try:
            doc = json.loads(raw)
            query, variables = str(doc["query"]), doc.get("variables") or {}
            field = fake_graphql.parse(query, variables)[1]
        except (ValueError, KeyError, TypeError, fake_graphql.GraphQLError) as exc:
            return self._send(h, "graphql:?", ua, 400, {"errors": [{"message": str(exc)}]})
        route = "graphql:" + field
        fault = self._take_fault(route)
        if fault is not None and not fault.after:
            return self._fault(h, route, ua, fault)
        if field in ("podRentInterruptable", "podFindAndDeployOnDemand"):
            self.creates.append(fake_graphql.parse(query, variables)[2].get("input") or {})
        answer = fake_graphql.resolve(self.cloud, query, variables)
        if fault is not None:
            return self._fault(h, route, ua, fault)
        self._send(h, route, ua, 200, answer)

    def _rest(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        cloud = self.cloud
        if parts[0] == "pods":
            if method == "POST" and len(parts) == 1:
                self.creates.append(body)
                return 201, self._create(body).rest()
            if method == "GET" and len(parts) == 1:
                name = query.get("name", [None])[0]
                pods = [p.rest() for p in cloud.list(name)]
                wanted = query.get("desiredStatus")
                return 200, [p for p in pods if not wanted or p["desiredStatus"] in wanted]
            if method == "GET" and len(parts) == 2:
                return 200, cloud.get(parts[1]).rest()
            if method == "DELETE" and len(parts) == 2:
                cloud.delete(parts[1])
                return 204, None
            if method == "POST" and len(parts) == 3 and parts[2] in ("stop", "start"):
                pod = cloud.stop(parts[1]) if parts[2] == "stop" else cloud.start(parts[1])
                return 200, pod.rest()
        if parts[0] == "networkvolumes":
            if method == "POST" and len(parts) == 1:
                return 200, cloud.create_volume(body["name"], body["size"], body["dataCenterId"])
            if method == "GET" and len(parts) == 1:
                return 200, [dict(v) for v in cloud.volumes.values()]
            if method == "GET" and len(parts) == 2:
                return 200, cloud.volume(parts[1])
            if method == "DELETE" and len(parts) == 2:
                cloud.delete_volume(parts[1])
                return 204, None
        return 404, {"message": f"no route {method} {path}"}

    def _create(self, body: dict[str, Any]) -> Any:
        if not isinstance(body.get("name"), str) or not isinstance(body.get("gpuTypeIds"), list):
            raise CloudError(400, "name and gpuTypeIds are required")
        volume = body.get("networkVolumeId")
        if volume:
            dc = self.cloud.volume(volume)["dataCenterId"]
            if body.get("dataCenterIds") and dc not in body["dataCenterIds"]:
                raise CloudError(400, f"network volume {volume} is in {dc}")
        return self.cloud.create(
            name=body["name"],
            image=str(body.get("imageName") or ""),
            gpu_ids=list(body["gpuTypeIds"]),
            count=int(body.get("gpuCount") or 1),
            cloud=str(body.get("cloudType") or "SECURE"),
            interruptible=bool(body.get("interruptible")),
            env=dict(body.get("env") or {}),
            ports=list(body.get("ports") or []),
            argv=list(body.get("dockerStartCmd") or []),
            container_disk_gb=int(body.get("containerDiskInGb") or 50),
            volume_in_gb=int(body.get("volumeInGb") or 0),
            volume_mount_path=str(body.get("volumeMountPath") or "/workspace"),
            network_volume_id=volume,
        )

    def _forward(self, h: _Handler, m: re.Match, query: str, raw: bytes, ua: str) -> None:
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

    def _fault(self, h: _Handler, route: str, ua: str, fault: Fault) -> None:
        if fault.delay:
            time.sleep(fault.delay)
        body = fault.body
        if body is None:
            body = {"message": {429: "rate limit exceeded"}.get(fault.status, "Internal error")}
        headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
        self._send(h, route, ua, fault.status, body, headers=headers)

    def _send(
        self,
        h: _Handler,
        route: str,
        ua: str,
        status: int,
        body: Any,
        kind: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.seen.append(Seen(h.command, route, ua, status))
        data = (
            body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        )
        try:
            h.send_response(status)
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            if status != 204:
                h.send_header("Content-Type", kind)
            h.send_header("Content-Length", str(len(data) if status != 204 else 0))
            h.end_headers()
            if status != 204:
                h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout the test asked for)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeRunPod

    def do_GET(self) -> None:
        self.fake.handle(self)

    do_POST = do_DELETE = do_PATCH = do_PUT = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass
