"""A fake IO.net CaaS on 127.0.0.1 that speaks ``shared/providers/ionet.md``.

* ``/enterprise/v1/io-cloud/caas/...``: hardware, available replicas, price estimates
  (``location_ids`` a JSON array in the query), deploy, deployments (paged, each status in a
  random case: clients must compare case-insensitively), details (secret env values never
  returned, only their keys), extend, delete, containers, and a container's log as a chunked
  text stream that stays open ``log_hold_s`` after its last line.
* The published contract (``contracts/ionet-enterprise-caas.json``, :attr:`FakeIonet.contract`):
  every request under ``/enterprise/v1/io-cloud/caas`` is checked against the document before
  the fake sees it (one it would refuse gets FastAPI's 422 ``{"detail": [{"loc", "msg",
  "type"}]}`` and is recorded) and every answer the fake gives is checked too;
  ``fake.contract.assert_clean()`` (the fixture's teardown) fails the test on any violation.
  Answers the document does not describe are sent unchecked, each an assumption named in
  ``docs/providers.md`` ("Assumptions no published contract settles", IO.net): the 401 of a
  missing key, the 400 of no capacity, the 409 of a taken name, the 429 of ``limit_per_min``,
  the log stream (text, not JSON), and the faults a test asks for.
* ``x-api-key`` required (401 ``{"detail"}`` otherwise: IO.net's guide; the document declares
  the header optional and applies no security scheme); an ``Authorization`` header is a 400
  (the docs say never send one). A ``limit_per_min`` (429 with ``Retry-After``) when set.
* Faults (:meth:`FakeIonet.fail`): any status, a plain-text or HTML body, ``after=True``.
* A deployment goes ``deployment requested`` -> ``running`` after ``step`` s; its container
  runs its entrypoint + args on this machine, in a root of its own, and is reached at its
  ``public_url`` (``/proxy/<deployment>/...`` here). :meth:`FakeIonet.interrupt` fails the
  container's node: it is killed and replaced by a new container (new ids, fresh root). With
  ``minutes_per_s`` the prepaid time runs out (``completed``) on an accelerated clock.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from support import fakehttp
from support.containers import Container, Forwarder
from support.fakehttp import QuietHandler
from support.openapi_contract import ContractCheck, load, unchecked

API_KEY = "io-v2-FAKE0123456789abcdef-secret"
BASE = "/enterprise/v1/io-cloud/caas"
HTML_PAGE = b"<html><head><title>503 Service Unavailable</title></head><body>down</body></html>"

HARDWARE = [
    {
        "hardware_id": 7,
        "hardware_name": "H100",
        "brand_name": "NVIDIA",
        "max_gpus_per_container": 8,
        "hourly": 2.5,
    },
    {
        "hardware_id": 12,
        "hardware_name": "RTX 4090",
        "brand_name": "NVIDIA",
        "max_gpus_per_container": 4,
        "hourly": 0.4,
    },
    {
        "hardware_id": 15,
        "hardware_name": "A100-SXM4-80GB",
        "brand_name": "NVIDIA",
        "max_gpus_per_container": 8,
        "hourly": 1.5,
    },
]
LOCATIONS = [
    {"id": 9, "iso2": "DE", "name": "Frankfurt"},
    {"id": 3, "iso2": "US", "name": "Dallas"},
]


#: the statuses the document declares for every operation (200, 404 without a body, 422 with
#: FastAPI's validation errors); any other answer is one the document does not describe
DOCUMENTED = (200, 404, 422)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class _CaasContract(ContractCheck):
    """The CaaS document's paths carry the whole prefix (its server is the bare host)."""

    def api_path(self, path: str) -> str:
        return path


def _refuse(violations: list[str]) -> tuple[int, Any]:
    """What FastAPI answers a request its models refuse: 422 with one error per violation."""
    return 422, {
        "detail": [
            {"loc": ["request"], "msg": v.split(": request: ", 1)[-1], "type": "value_error"}
            for v in violations
        ]
    }


def contract_check() -> ContractCheck:
    return _CaasContract(load("ionet-enterprise-caas.json"), BASE, _refuse)


@dataclass
class Fault(fakehttp.Fault):
    """``body``: a plain-text or HTML body instead of JSON ``{"detail"}``."""

    body: bytes | None = None


@dataclass
class Worker:
    container_id: str
    device_id: str
    container: Container
    status: str = "running"
    created_at: str = field(default_factory=now_iso)


@dataclass
class Dep:
    id: str
    name: str
    body: dict[str, Any]
    status: str = "deployment requested"
    created_at: str = field(default_factory=now_iso)
    started: float | None = None
    paid_minutes: float = 0.0
    worker: Worker | None = None
    history: list[str] = field(default_factory=list)


class FakeIonet:
    def __init__(
        self,
        root: Path,
        *,
        api_key: str = API_KEY,
        step: float = 0.2,
        capacity: int = 4,
        limit_per_min: int | None = None,
        minutes_per_s: float = 0.0,
        log_hold_s: float = 30.0,
        seed: int = 7,
    ):
        self.root = Path(root)
        self.api_key = api_key
        self.step = step
        self.capacity = {
            (h["hardware_id"], loc["id"]): capacity for h in HARDWARE for loc in LOCATIONS
        }
        self.limit_per_min = limit_per_min
        self.minutes_per_s = minutes_per_s
        self.log_hold_s = log_hold_s
        self.rng = random.Random(seed)
        self.deps: dict[str, Dep] = {}
        #: the words the fake says instead of ``running``, for a deployment and for a running
        #: container (IO.net documents no container words; a deployment's may be new ones)
        self.running_word = "running"
        self.container_word = "running"
        #: a command run instead of the deployment's (an image that lacks what it needs)
        self.command_override: list[str] | None = None
        self.deploys: list[dict[str, Any]] = []
        self.seen: list[tuple[float, str, int]] = []
        self.faults: fakehttp.Faults[Fault] = fakehttp.Faults()
        self.lock = threading.RLock()
        self._window: deque[float] = deque()
        self._timers: list[threading.Timer] = []
        self._forward = Forwarder()
        #: the published document every exchange under BASE is checked against
        self.contract = contract_check()
        self.server = fakehttp.start_server(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def settings(self) -> dict[str, Any]:
        return {"api_url": self.base_url + BASE}

    def env(self) -> dict[str, str]:
        return {"CORRAL_IONET_API_URL": self.base_url + BASE}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            for timer in self._timers:
                timer.cancel()
            for dep in self.deps.values():
                if dep.worker is not None:
                    dep.worker.container.kill()
        self._forward.close()

    def fail(self, target: str, status: int = 500, **kw: Any) -> Fault:
        return self.faults.add(Fault(target, status, **kw))

    def routes(self, prefix: str = "") -> list[str]:
        return [r for _, r, _ in self.seen if r.startswith(prefix)]

    def live(self) -> list[Dep]:
        with self.lock:
            return [d for d in self.deps.values() if d.status not in ("destroyed",)]

    # --- the cloud --------------------------------------------------------------------------

    def _later(self, delay: float, fn: Any, *args: Any) -> None:
        timer = threading.Timer(delay, fn, args)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _start_container(self, dep: Dep) -> None:
        config = dep.body["container_config"]
        env = {**(config.get("env_variables") or {}), **(config.get("secret_env_variables") or {})}
        argv = self.command_override or (
            list(config.get("entrypoint") or []) + list(config.get("args") or [])
        )
        cid = uuid.uuid4().hex[:12]
        container = Container(argv or ["true"], env, self.root / dep.id / cid)
        container.start()
        dep.worker = Worker(container_id=cid, device_id=str(uuid.uuid4()), container=container)
        dep.history.append(cid)

    def _run(self, dep_id: str) -> None:
        with self.lock:
            dep = self.deps.get(dep_id)
            if dep is None or dep.status != "deployment requested":
                return
            dep.status = "running"
            dep.started = time.monotonic()
            self._start_container(dep)

    def interrupt(self, dep_id: str) -> None:
        """The container's node fails: it dies, and a new container replaces it."""
        with self.lock:
            dep = self.deps[dep_id]
            if dep.worker is not None:
                dep.worker.container.kill()
                dep.worker = None
        self._later(self.step, self._replace, dep_id)

    def _replace(self, dep_id: str) -> None:
        with self.lock:
            dep = self.deps.get(dep_id)
            if dep is not None and dep.status == "running" and dep.worker is None:
                self._start_container(dep)

    def remaining(self, dep: Dep) -> float:
        used = 0.0
        if dep.started is not None:
            used = (time.monotonic() - dep.started) * self.minutes_per_s
        return dep.paid_minutes - used

    def served(self, dep: Dep) -> int:
        return int(max(0.0, dep.paid_minutes - max(0.0, self.remaining(dep))))

    def completed(self, dep: Dep) -> float:
        return round(100.0 * self.served(dep) / dep.paid_minutes, 2) if dep.paid_minutes else 0.0

    def _tick(self, dep: Dep) -> None:
        if dep.status == "running" and self.minutes_per_s and self.remaining(dep) <= 0:
            dep.status = "completed"
            if dep.worker is not None:
                dep.worker.container.kill()
                dep.worker = None

    # --- HTTP ---------------------------------------------------------------------------------

    def _case(self, status: str) -> str:
        if status == "running":
            status = self.running_word
        return self.rng.choice([status, status.upper(), status.title()])

    def _dep(self, dep_id: str) -> Dep:
        dep = self.deps.get(dep_id)
        if dep is None:
            raise _Error(404, {"detail": "Not found"})
        self._tick(dep)
        return dep

    def details(self, dep: Dep) -> dict[str, Any]:
        config = dep.body["container_config"]
        hw = next(h for h in HARDWARE if h["hardware_id"] == dep.body["hardware_id"])
        loc = next(x for x in LOCATIONS if x["id"] == dep.body["location_ids"][0])
        return {
            "id": dep.id,
            "status": self._case(dep.status),
            "created_at": dep.created_at,
            "started_at": None,
            "finished_at": None,
            "amount_paid": round(dep.paid_minutes / 60 * hw["hourly"], 4),
            "completed_percent": self.completed(dep),
            "total_gpus": dep.body["gpus_per_container"],
            "gpus_per_container": dep.body["gpus_per_container"],
            "total_containers": 1,
            "hardware_name": hw["hardware_name"],
            "hardware_id": hw["hardware_id"],
            "locations": [loc],
            "brand_name": "NVIDIA",
            "compute_minutes_served": self.served(dep),
            "compute_minutes_remaining": int(self.remaining(dep)),
            "container_config": {
                "entrypoint": config.get("entrypoint"),
                "env_variables": dict(config.get("env_variables") or {}),
                "traffic_port": config["traffic_port"],
                "image_url": dep.body["registry_config"]["image_url"],
                "secret_env_keys": sorted(config.get("secret_env_variables") or {}),
            },
        }

    def api(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        parts = path.strip("/").split("/")
        with self.lock:
            if method == "GET" and path == "/hardware/max-gpus-per-container":
                items = [
                    {k: v for k, v in h.items() if k != "hourly"}
                    | {
                        "available": sum(
                            self.capacity[(h["hardware_id"], x["id"])] for x in LOCATIONS
                        )
                    }
                    for h in HARDWARE
                ]
                return {"data": {"hardware": items, "total": len(items)}}
            if method == "GET" and path == "/available-replicas":
                hid, qty = int(query["hardware_id"][0]), int(query["hardware_qty"][0])
                return {
                    "data": [
                        {
                            **loc,
                            "available_replicas": self.capacity[(hid, loc["id"])]
                            // max(1, qty // 4 + 1),
                        }
                        for loc in LOCATIONS
                    ]
                }
            if method == "GET" and path == "/price":
                locs = json.loads(query["location_ids"][0])
                if not isinstance(locs, list) or len(locs) != 1:
                    raise _Error(422, _invalid(["query", "location_ids"], "one location id"))
                hid = int(query["hardware_id"][0])
                hours = int(query["duration_hours"][0])
                gpus = int(query["gpus_per_container"][0])
                hw = next(h for h in HARDWARE if h["hardware_id"] == hid)
                total = hw["hourly"] * gpus * hours * 1.03
                return {
                    "data": {
                        "replica_count": 1,
                        "gpus_per_container": gpus,
                        "available_replica_count": [
                            self.capacity.get((hid, loc), 0) for loc in locs
                        ],
                        "discount": 0,
                        "ionet_fee": round(total * 0.02, 4),
                        "ionet_fee_percent": 2,
                        "currency_conversion_fee": round(total * 0.01, 4),
                        "currency_conversion_fee_percent": 1,
                        "total_cost_usdc": round(total, 4),
                    }
                }
            if method == "POST" and path == "/deploy":
                return self._deploy(body)
            if method == "GET" and path == "/deployments":
                page = int((query.get("page") or ["0"])[0])
                size = int((query.get("page_size") or ["10"])[0])
                rows = []
                for dep in self.deps.values():
                    self._tick(dep)
                    hw = next(h for h in HARDWARE if h["hardware_id"] == dep.body["hardware_id"])
                    rows.append(  # the document's fields only (no created_at: details have it)
                        {
                            "id": dep.id,
                            "status": self._case(dep.status),
                            "name": dep.name,
                            "completed_percent": self.completed(dep),
                            "hardware_quantity": dep.body["gpus_per_container"],
                            "brand_name": hw["brand_name"],
                            "hardware_name": hw["hardware_name"],
                            "compute_minutes_served": self.served(dep),
                            "compute_minutes_remaining": int(self.remaining(dep)),
                        }
                    )
                return {
                    "data": {
                        "deployments": rows[page * size : (page + 1) * size],
                        "total": len(rows),
                        "statuses": sorted({d.status for d in self.deps.values()}),
                    }
                }
            if parts[0] == "deployment" and len(parts) >= 2:
                dep = self._dep(parts[1])
                if len(parts) == 2 and method == "GET":
                    return {"data": self.details(dep)}
                if len(parts) == 2 and method == "DELETE":
                    if dep.status not in ("termination requested", "destroyed"):
                        dep.status = "termination requested"
                        if dep.worker is not None:
                            dep.worker.container.kill()
                            dep.worker = None
                        self._later(self.step, self._destroy, dep.id)
                    return {"status": "TERMINATION REQUESTED", "deployment_id": dep.id}
                if parts[2:] == ["extend"] and method == "POST":
                    hours = body.get("duration_hours") if isinstance(body, dict) else None
                    if not isinstance(hours, int) or hours <= 0:
                        raise _Error(422, _invalid(["body", "duration_hours"], "greater than 0"))
                    dep.paid_minutes += hours * 60
                    return {"data": self.details(dep)}
                if parts[2:] == ["containers"] and method == "GET":
                    workers = []
                    w = dep.worker
                    if w is not None and dep.status == "running":
                        word = self.container_word if w.container.running() else "exited"
                        workers.append(
                            {
                                "device_id": w.device_id,
                                "container_id": w.container_id,
                                "hardware": "H100",
                                "brand_name": "NVIDIA",
                                "created_at": w.created_at,
                                "uptime_percent": 100.0,
                                "gpus_per_container": dep.body["gpus_per_container"],
                                "status": self.rng.choice([word, word.upper(), word.title()]),
                                "public_url": f"{self.base_url}/proxy/{dep.id}",
                                "container_events": None,
                            }
                        )
                    return {"data": {"total": len(workers), "workers": workers}}
        raise _Error(404, {"detail": "Not Found"})

    def _destroy(self, dep_id: str) -> None:
        with self.lock:
            dep = self.deps.get(dep_id)
            if dep is not None:
                dep.status = "destroyed"

    def _deploy(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _Error(422, _invalid(["body"], "Input should be a valid dictionary"))
        for name in (
            "resource_private_name",
            "gpus_per_container",
            "hardware_id",
            "container_config",
            "registry_config",
        ):
            if name not in body:
                raise _Error(422, _invalid(["body", name], "Field required"))
        config = body["container_config"]
        for name in ("replica_count", "traffic_port"):
            if name not in config:
                raise _Error(422, _invalid(["body", "container_config", name], "Field required"))
        if "args" in config and not config["args"]:
            raise _Error(422, _invalid(["body", "container_config", "args"], "at least 1 item"))
        if not 1 <= int(body["gpus_per_container"]) <= 8:
            raise _Error(422, _invalid(["body", "gpus_per_container"], "1-8"))
        locs = body.get("location_ids") or []
        if len(locs) != 1:
            raise _Error(422, _invalid(["body", "location_ids"], "exactly one location"))
        name = body["resource_private_name"]
        if any(d.name == name and d.status != "destroyed" for d in self.deps.values()):
            # IO.net's reference page: the name must be unique (the status is an assumption)
            raise _Error(409, {"detail": f"Deployment with name {name} already exists"})
        key = (int(body["hardware_id"]), int(locs[0]))
        if self.capacity.get(key, 0) <= 0:
            raise _Error(400, {"detail": "No capacity available for the requested hardware"})
        self.capacity[key] -= 1
        self.deploys.append(body)
        dep = Dep(
            id=str(uuid.uuid4()),
            name=body["resource_private_name"],
            body=body,
            paid_minutes=float(body.get("duration_hours") or 1) * 60,
        )
        self.deps[dep.id] = dep
        self._later(self.step, self._run, dep.id)
        return {"status": "DEPLOYMENT REQUESTED", "deployment_id": dep.id}

    def log_lines(self, dep_id: str, container_id: str) -> list[bytes]:
        with self.lock:
            dep = self.deps.get(dep_id)
            if dep is None or dep.worker is None or dep.worker.container_id != container_id:
                raise _Error(404, {"detail": "container not found"})
            text = dep.worker.container.log()
        return [line.encode() + b"\n" for line in text.splitlines()]

    def handle(self, h: QuietHandler) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        if url.path.startswith("/proxy/"):
            return self._proxy(h, url, raw)
        if not url.path.startswith(BASE + "/"):
            return self._send(h, "?", 404, {"detail": "Not Found"})
        path = url.path[len(BASE) :]
        route = f"{h.command} {path}"
        if h.headers.get("Authorization"):
            return self._send(h, route, 400, {"detail": "send the key as x-api-key"})
        if h.headers.get("x-api-key") != self.api_key:
            return self._send(h, route, 401, {"detail": "Invalid API key"})
        if self.limit_per_min is not None:
            now = time.monotonic()
            with self.lock:
                while self._window and self._window[0] <= now - 60:
                    self._window.popleft()
                if len(self._window) >= self.limit_per_min:
                    return self._send(
                        h, route, 429, {"detail": "Too many requests"}, headers={"Retry-After": "1"}
                    )
                self._window.append(now)
        fault = self.faults.take(route)
        if fault is not None and not fault.after:
            return self._fault(h, route, fault)
        parts = path.strip("/").split("/")
        if (
            h.command == "GET"
            and len(parts) == 4
            and parts[0] == "deployment"
            and parts[2] == "log"
        ):
            return self._stream_log(h, route, parts[1], parts[3])
        try:
            body = json.loads(raw) if raw else None
            answer = self.api(h.command, path, parse_qs(url.query), body)
            status = 200
        except _Error as exc:
            status, answer = exc.status, exc.body
        except (ValueError, KeyError, TypeError) as exc:
            status, answer = 422, _invalid(["query"], str(exc))
        if fault is not None:
            return self._fault(h, route, fault)
        self._send(h, route, status, answer)

    def _stream_log(self, h: QuietHandler, route: str, dep_id: str, cid: str) -> None:
        try:
            lines = self.log_lines(dep_id, cid)
        except _Error as exc:
            return self._send(h, route, exc.status, exc.body)
        self.seen.append((time.monotonic(), route, 200))
        # the document says application/json with an empty schema; the reference page says a
        # chunked stream of lines, which is what IO.net sends (an assumption, docs/providers.md)
        unchecked(h)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/plain; charset=utf-8")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for line in lines:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                h.wfile.flush()
            time.sleep(self.log_hold_s)  # a stream that follows: it does not end by itself
            h.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        h.close_connection = True

    def _proxy(self, h: QuietHandler, url: Any, raw: bytes) -> None:
        parts = url.path.split("/", 3)
        dep_id, rest = parts[2], "/" + (parts[3] if len(parts) > 3 else "")
        route = f"proxy {h.command} {rest}"
        with self.lock:
            dep = self.deps.get(dep_id)
            worker = dep.worker if dep is not None and dep.status == "running" else None
            port = worker.container.port if worker and worker.container.running() else None
        if port is None:
            return self._send(h, route, 502, HTML_PAGE, "text/html")
        target = rest + (f"?{url.query}" if url.query else "")
        answer = self._forward.forward(h.command, port, target, raw, dict(h.headers.items()))
        if answer is None:
            return self._send(h, route, 502, HTML_PAGE, "text/html")
        self._send(h, route, answer[0], answer[1], answer[2] or "application/octet-stream")

    def _fault(self, h: QuietHandler, route: str, fault: Fault) -> None:
        unchecked(h)  # a fault the test asked for: its shape is the test's
        headers = fault.headers()
        if fault.body is not None:
            kind = "text/html" if fault.body.lstrip().startswith(b"<") else "text/plain"
            return self._send(h, route, fault.status, fault.body, kind, headers)
        self._send(h, route, fault.status, {"detail": "Internal Server Error"}, headers=headers)

    def _send(
        self,
        h: QuietHandler,
        route: str,
        status: int,
        body: Any,
        kind: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.seen.append((time.monotonic(), route, status))
        if status not in DOCUMENTED:
            # 400 no capacity, 401 no key, 409 a taken name, 429 the fake's limit: the document
            # declares none of them (FastAPI lists only what its models raise); named in
            # docs/providers.md, sent in FastAPI's HTTPException shape {"detail": "..."}
            unchecked(h)
        fakehttp.send(h, status, body, kind, headers, content_type="always")


class _Error(Exception):
    def __init__(self, status: int, body: Any):
        super().__init__(str(body))
        self.status, self.body = status, body


def _invalid(loc: list[str], msg: str) -> dict[str, Any]:
    return {
        "detail": [
            {
                "loc": loc,
                "msg": msg,
                "type": "missing" if msg == "Field required" else "value_error",
            }
        ]
    }
