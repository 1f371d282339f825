"""A stand-in for many machines and their agents, served by one process: the controller at
scale without a thousand agent processes.

:class:`StandInServer` answers the agent's HTTP protocol (``/health``, ``/ready``,
``/status``, ``/poll``, ``/events``, ``/logs``, ``/stop``, each with the attempt's bearer
token) for every machine under ``/a/<launch key>/``, and a small admin API for the provider
(``/admin/...``: launch, status, terminate, preempt, finish, list; and the times each agent
was polled). Each agent rings its controller's bell as the real agent does
(:mod:`corral.wire.bell`: ``hello``, a ``change`` for each event but progress, a ``beat``
every ten seconds), from one socket and one thread for every agent. Each simulated agent runs its job on the server's clock, lazily (nothing runs
between requests): ``setup`` for ``boot_s``, then ``running`` with a log line every
``log_every_s`` and a progress event every ``progress_every_s``, until the job's length (a
plan whose first stage runs ``sleep N`` lasts N seconds, else ``run_s``) or a stop.

:class:`StandInProvider` (name ``standin``) is a provider whose machines are those of a
stand-in server (``CORRAL_STANDIN_URL``); register it with
``CORRAL_PROVIDER_PLUGINS=standin=corral.testing.standin:StandInProvider`` and
``CORRAL_PROVIDERS=standin``. It sells one CPU machine at ``CORRAL_STANDIN_PRICE`` $/h
(default 0), never runs out, and preempts on request (``SupportsSimulatedPreemption``: the
agent stops as on SIGTERM, the machine is PREEMPTED, and after the grace period the agent no
longer answers). Its ``status`` reads one listing of every machine, kept for
``CORRAL_STANDIN_LIST_CACHE_S`` seconds (default 1; 0 asks for each machine alone), as the
container clouds' providers do; its ``statuses`` is one listing for the controller's census
(``SupportsStatusListing``: the machines of belled runs).

Its agents answer with the wire's own models (:mod:`corral.wire.status`,
:mod:`corral.wire.events`, :mod:`corral.wire.poll`), built and serialised as the agent does:
a change of the wire is a change of the stand-in's answers, never a drift between the two.

``python -m corral.testing.standin --port 0 --ready-file F`` serves one (the URL is written
to F once it listens). Test and benchmark support only: nothing in the product imports it.
"""

from __future__ import annotations

import argparse
import collections
import heapq
import hmac
import itertools
import json
import os
import re
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import httpx
from pydantic import BaseModel

from corral.errors import NotFound, ProviderError
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    Offer,
    Provider,
    Requirements,
    SupportsSimulatedPreemption,
)
from corral.providers.listing import StatusListing, SupportsStatusListing
from corral.wire import WIRE_VERSION, bell
from corral.wire.events import AgentEvent, EventsPage
from corral.wire.poll import (
    DEFAULT_LOG_LIMIT,
    MAX_POLL_EVENTS,
    LogChunk,
    LogSizes,
    PollAnswer,
    StageLogChunk,
    decode_offsets,
)
from corral.wire.status import AgentStatus, Phase, StageState, StageStatus

ENV_URL = "CORRAL_STANDIN_URL"
ENV_PRICE = "CORRAL_STANDIN_PRICE"
#: how long one listing of every machine answers ``status`` (as the container clouds' list
#: caches do: a status is one dict lookup, not one request per machine per look)
ENV_LIST_CACHE_S = "CORRAL_STANDIN_LIST_CACHE_S"
LIST_CACHE_S = 1.0
_SLEEP = re.compile(r"^\s*sleep\s+(\d+(?:\.\d+)?)\s*$")


@dataclass
class Config:
    boot_s: float = 0.2
    run_s: float = 3600.0
    log_every_s: float = 2.0
    progress_every_s: float = 5.0
    #: seconds an agent takes to stop once asked (or SIGTERMed by a preemption)
    stop_s: float = 0.2


@dataclass
class SimAgent:
    """One machine and its agent, advanced lazily to the server's clock."""

    key: str
    run_id: str
    attempt: int
    token: bytes
    stage: str
    launched: float
    run_s: float
    instance_id: str = field(default_factory=lambda: f"si-{uuid.uuid4().hex[:10]}")
    state: str = "running"  # the machine: running | preempted | terminated
    stop_at: float | None = None
    stop_cause: str | None = None
    stop_reason: str = ""
    killed_at: float | None = None
    events: list[AgentEvent] = field(default_factory=list)
    log: list[bytes] = field(default_factory=list)
    log_size: int = 0
    polls: list[float] = field(default_factory=list)
    #: where this agent rings its controller's bell (learnt from its requests) and how
    #: (the server's :meth:`StandInServer.ring`), as the real agent does (``agent.bell``)
    bell: tuple[str, int] | None = None
    ring: Any = None
    rings: int = 0
    #: launch requests for this key (a launch repeated with the key is answered, not run
    #: again; more than one says a controller launched one attempt twice)
    launches: int = 1
    _lines: int = 0
    _progress: int = 0
    _phase: str = "setup"

    def _emit(self, now: float, type_: str, stage: str | None = None, **data: Any) -> None:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
        self.events.append(
            AgentEvent(seq=len(self.events) + 1, ts=ts, type=type_, stage=stage, data=data)
        )
        if type_ != "progress" and self.ring is not None:
            self.ring(self, "change")

    def advance(self, now: float, cfg: Config) -> None:
        """Everything that happened on this machine up to ``now``."""
        if self._phase in ("succeeded", "stopped"):
            return
        started = self.launched + cfg.boot_s
        if self._phase == "setup":
            if now < started:
                return
            self._emit(now, "attempt.started", run_id=self.run_id, attempt=self.attempt)
            self._emit(now, "stage.started", self.stage, gpus=[])
            self._phase = "running"
        end = started + self.run_s
        until = min(now, end, self.stop_at if self.stop_at is not None else now)
        while started + (self._lines + 1) * cfg.log_every_s <= until:
            self._lines += 1
            line = f"2026-01-01T00:00:00.000Z line {self._lines} of {self.stage}\n".encode()
            self.log.append(line)
            self.log_size += len(line)
        while started + (self._progress + 1) * cfg.progress_every_s <= until:
            self._progress += 1
            self._emit(now, "progress", self.stage, step=self._progress)
        if self.stop_at is not None and now >= self.stop_at:
            if self._phase == "running":
                self._phase = "stopping"
                self._emit(now, "stop.requested", reason=self.stop_reason)
            if now >= self.stop_at + cfg.stop_s:
                self._finish(now, "stopped", "stopped")
        elif now >= end:
            self._finish(now, "succeeded", "succeeded")

    def _finish(self, now: float, phase: str, stage_state: str) -> None:
        self._emit(now, "stage.finished", self.stage, state=stage_state, exit_code=0)
        self._phase = phase
        reason = self.stop_reason if phase == "stopped" else ""
        self._emit(now, "attempt.finished", phase=phase, failed_stage=None, reason=reason)

    def answers(self, now: float) -> bool:
        return self.state != "terminated" and (self.killed_at is None or now < self.killed_at)

    def status(self) -> AgentStatus:
        stage_state = {"setup": "pending", "stopping": "running"}.get(self._phase, self._phase)
        stopped = self._phase == "stopped"
        return AgentStatus(
            wire_version=WIRE_VERSION,
            run_id=self.run_id,
            attempt=self.attempt,
            phase=Phase(self._phase),
            reason=self.stop_reason if stopped else "",
            stop_cause=self.stop_cause if stopped else None,
            stages=[StageStatus(name=self.stage, state=StageState(stage_state))],
        )

    def events_after(
        self, after: int, limit: int = MAX_POLL_EVENTS
    ) -> tuple[list[AgentEvent], int]:
        """The events after ``after`` (at most ``limit``) and the cursor after them."""
        page = self.events[after : after + limit]
        return page, page[-1].seq if page else min(after, len(self.events))

    def poll(self, query: dict[str, str]) -> PollAnswer:
        """``GET /poll`` as the agent answers it (:mod:`corral.wire.poll`)."""
        after = int(query.get("events_after") or 0)
        offsets = decode_offsets(query.get("logs", ""))
        limit = int(query.get("log_limit") or DEFAULT_LOG_LIMIT)
        logs = {}
        offset = offsets.get(self.stage, 0)
        if offset < self.log_size:
            data, nxt = self.chunk(offset, limit)
            if nxt > offset:
                logs[self.stage] = LogChunk(offset=offset, next_offset=nxt, data=data)
        events, events_next = self.events_after(after)
        return PollAnswer(
            wire_version=WIRE_VERSION,
            status=self.status(),
            events=events,
            events_next=events_next,
            logs=logs,
            log_sizes={self.stage: self.log_size},
            more=len(events) >= MAX_POLL_EVENTS,
        )

    def chunk(self, offset: int, limit: int) -> tuple[str, int]:
        """Whole log lines from byte ``offset`` (a line start), at most ``limit`` bytes."""
        data, pos = bytearray(), 0
        for line in self.log:
            if pos >= offset:
                if len(data) + len(line) > limit:
                    break
                data += line
            pos += len(line)
        return data.decode(), offset + len(data)


class StandInServer(ThreadingHTTPServer):
    """Many agents (and the machines under them) in one HTTP server."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int] = ("127.0.0.1", 0), cfg: Config | None = None):
        self.cfg = cfg or Config()
        self.agents: dict[str, SimAgent] = {}
        self.lock = threading.Lock()
        self.clock = time.monotonic
        #: the provider's questions so far: ``listing`` (every machine), ``instance`` (one)
        self.asked: collections.Counter[str] = collections.Counter()
        super().__init__(address, _Handler)
        #: the agents' bell: one socket, and when each agent has something to ring next (its
        #: boot, its job's end, the end of a stop), as ``(monotonic time, key)``
        self._bell_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._bell_sock.setblocking(False)
        self._due: list[tuple[float, str]] = []
        self._beats: collections.deque[str] = collections.deque()
        self._ticker: threading.Thread | None = None

    def ring(self, agent: SimAgent, kind: str) -> None:
        """``agent`` rings its controller's bell (under the lock)."""
        if agent.bell is None:
            return
        agent.rings += 1
        ring = bell.Ring(agent.run_id, agent.attempt, kind, agent.rings)
        try:
            self._bell_sock.sendto(bell.encode(ring, agent.token.decode()), agent.bell)
        except OSError:
            pass

    def heard(self, agent: SimAgent, header: str | None) -> None:
        """A controller's request named its bell (under the lock)."""
        found = bell.parse_header(header)
        if found is None or (found.host, found.port) == agent.bell:
            return
        first = agent.bell is None
        agent.bell = (found.host, found.port)
        agent.ring = self.ring
        self.ring(agent, "hello")
        if first:
            self._beats.append(agent.key)
            self._start_ticker()

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="standin-bell", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        """Every 0.1 s: the agents whose next event is due are advanced (a job ending is
        rung when it ends, not at the next request), and a tenth of a beat's worth of agents
        beat."""
        every = 0.1
        while True:
            time.sleep(every)
            now = self.clock()
            with self.lock:
                while self._due and self._due[0][0] <= now:
                    _, key = heapq.heappop(self._due)
                    agent = self.agents.get(key)
                    if agent is not None and agent.answers(now):
                        agent.advance(now, self.cfg)
                share = len(self._beats) * every / bell.BEAT_S
                for _ in range(min(len(self._beats), max(1, round(share)))):
                    key = self._beats.popleft()
                    agent = self.agents.get(key)
                    if agent is None or not agent.answers(now):
                        continue  # a machine gone falls silent
                    self._beats.append(key)
                    self.ring(agent, "beat")

    def due(self, at: float, key: str) -> None:
        """``key`` has an event to ring at ``at`` (under the lock)."""
        heapq.heappush(self._due, (at, key))

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="standin", daemon=True)
        thread.start()
        return thread

    # --- admin ------------------------------------------------------------------------------

    def launch(self, body: dict[str, Any]) -> SimAgent:
        key = str(body["key"])
        with self.lock:
            agent = self.agents.get(key)
            if agent is None:
                agent = SimAgent(
                    key=key,
                    run_id=str(body["run_id"]),
                    attempt=int(body["attempt"]),
                    token=str(body["token"]).encode(),
                    stage=str(body.get("stage") or "main"),
                    launched=self.clock(),
                    run_s=float(body.get("run_s") or self.cfg.run_s),
                )
                self.agents[key] = agent
                started = agent.launched + self.cfg.boot_s
                self.due(started, key)
                self.due(started + agent.run_s, key)
            else:
                agent.launches += 1
            return agent

    def instance(self, agent: SimAgent) -> dict[str, Any]:
        return {
            "key": agent.key,
            "instance_id": agent.instance_id,
            "state": agent.state,
            "endpoint": f"{self.url}/a/{agent.key}",
            "run_id": agent.run_id,
            "launches": agent.launches,
        }

    def preempt(self, key: str, grace: float) -> None:
        now = self.clock()
        with self.lock:
            agent = self.agents[key]
            if agent.state == "running":
                agent.state = "preempted"
                agent.advance(now, self.cfg)
                if agent.stop_at is None:
                    agent.stop_at, agent.stop_cause = now, "agent"
                    agent.stop_reason = "agent received SIGTERM"
                    agent.advance(now, self.cfg)  # its stop.requested, rung now
                    self.due(now + self.cfg.stop_s, key)
                agent.killed_at = now + grace

    def finish(self, key: str) -> None:
        """``key``'s job ends now, successfully (its stage's end, rung as it happens)."""
        now = self.clock()
        with self.lock:
            agent = self.agents[key]
            agent.advance(now, self.cfg)
            agent.run_s = max(0.0, now - agent.launched - self.cfg.boot_s)
            agent.advance(now, self.cfg)

    def poll_gaps(self, since: float, until: float) -> dict[str, Any]:
        """Per agent, the longest wait between two polls within [since, until] (the edges
        count, as for a poll due just after them), and how many polls there were."""
        out: dict[str, Any] = {}
        with self.lock:
            for key, agent in self.agents.items():
                inside = [t for t in agent.polls if since < t <= until]
                marks = [since, *inside, until]
                gap = max(b - a for a, b in itertools.pairwise(marks))
                out[key] = {"max_gap": gap, "polls": len(inside), "state": agent.state}
        return out


class _Handler(BaseHTTPRequestHandler):
    server: StandInServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _send(self, status: int, body: Any) -> None:
        if isinstance(body, BaseModel):  # a wire model: serialised as the agent does
            body = body.model_dump(mode="json")
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw.strip() else {}
        parts = url.path.strip("/").split("/")
        try:
            if parts[0] == "admin":
                status, answer = self._admin(method, parts[1:], body, query)
            elif parts[0] == "a" and len(parts) == 3:
                status, answer = self._agent(method, parts[1], parts[2], body, query)
            else:
                status, answer = 404, {"error": "not found"}
        except KeyError as e:
            status, answer = 404, {"error": f"unknown {e}"}
        except (ValueError, TypeError) as e:
            status, answer = 400, {"error": str(e)}
        self._send(status, answer)

    def _admin(
        self, method: str, parts: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> tuple[int, Any]:
        srv = self.server
        what = parts[0] if parts else ""
        if what == "launch" and method == "POST":
            return 200, srv.instance(srv.launch(body))
        if what == "instances" and method == "GET" and len(parts) == 1:
            with srv.lock:
                srv.asked["listing"] += 1
                return 200, [srv.instance(a) for a in srv.agents.values()]
        if what == "instances" and len(parts) == 2 and method == "GET":
            with srv.lock:
                srv.asked["instance"] += 1
                return 200, srv.instance(srv.agents[parts[1]])
        if what == "terminate" and method == "POST" and len(parts) == 2:
            with srv.lock:
                agent = srv.agents.get(parts[1])
                if agent is not None:
                    agent.state = "terminated"
                    agent.log, agent.events = [], []  # the machine's disk goes with it
            return 200, {"terminated": True}
        if what == "preempt" and method == "POST" and len(parts) == 2:
            srv.preempt(parts[1], float(body.get("grace", 5.0)))
            return 200, {"preempted": True}
        if what == "finish" and method == "POST" and len(parts) == 2:
            srv.finish(parts[1])
            return 200, {"finished": True}
        if what == "clock" and method == "GET":
            return 200, {"now": srv.clock()}
        if what == "polls" and method == "GET":
            return 200, srv.poll_gaps(float(query["since"]), float(query["until"]))
        return 404, {"error": "not found"}

    def _agent(
        self, method: str, key: str, what: str, body: dict[str, Any], query: dict[str, str]
    ) -> tuple[int, Any]:
        srv = self.server
        now = srv.clock()
        with srv.lock:
            agent = srv.agents.get(key)
            if agent is None or not agent.answers(now):
                return 503, {"error": "the machine is gone"}
            given = (self.headers.get("Authorization") or "").partition(" ")[2].strip()
            if not hmac.compare_digest(given.encode(), agent.token):
                return 401, {"error": "unauthorized"}
            srv.heard(agent, self.headers.get(bell.HEADER))
            agent.advance(now, srv.cfg)
            if what in ("health", "ready"):
                return 200, {"ok": True, "ready": True, "wire_version": WIRE_VERSION}
            if what == "status":
                agent.polls.append(now)
                return 200, agent.status()
            if what == "poll":
                agent.polls.append(now)
                return 200, agent.poll(query)
            if what == "events":
                events, nxt = agent.events_after(int(query.get("after") or 0))
                return 200, EventsPage(events=events, next=nxt)
            if what == "logs":
                if "stage" not in query:
                    return 200, LogSizes(stages={agent.stage: agent.log_size})
                offset = int(query.get("offset") or 0)
                data, nxt = agent.chunk(offset, int(query.get("limit") or DEFAULT_LOG_LIMIT))
                return 200, StageLogChunk(
                    stage=agent.stage, offset=offset, next_offset=nxt, data=data
                )
            if what == "stop" and method == "POST":
                if agent.stop_at is None:
                    agent.stop_at = now
                    agent.stop_cause = str(body.get("cause") or "user")
                    agent.stop_reason = str(body.get("reason") or "stop requested")
                    agent.advance(now, srv.cfg)
                    srv.due(now + srv.cfg.stop_s, key)
                return 202, {"stopping": True}
        return 404, {"error": "not found"}


# --- the provider -----------------------------------------------------------------------------


class StandInProvider(Provider, SupportsSimulatedPreemption, SupportsStatusListing):
    """Machines of a stand-in server (``CORRAL_STANDIN_URL``): one CPU offer, no limit."""

    name: ClassVar[str] = "standin"
    shared_machines: ClassVar[bool] = True

    def __init__(self, url: str | None = None, price_per_hour: float | None = None):
        self.url = (url or os.environ.get(ENV_URL) or "").rstrip("/")
        if not self.url:
            raise ProviderError(f"the stand-in provider needs {ENV_URL}")
        self.price = float(
            price_per_hour if price_per_hour is not None else os.environ.get(ENV_PRICE) or 0.0
        )
        self._http = httpx.Client(timeout=10.0)
        self._cache_s = float(os.environ.get(ENV_LIST_CACHE_S) or LIST_CACHE_S)
        self._listing: tuple[float, dict[str, dict[str, Any]]] | None = None
        self._listing_lock = threading.Lock()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, self.url + path, **kw)
        except httpx.HTTPError as e:
            raise ProviderError(f"stand-in server unreachable: {type(e).__name__}") from None
        if resp.status_code == 404:
            raise NotFound(f"stand-in: {path} not found")
        if resp.status_code >= 400:
            raise ProviderError(f"stand-in answered {resp.status_code} on {path}")
        return resp.json()

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        if (req.gpu_count_min or 0) > 0:
            return []
        return [
            Offer(
                provider=self.name,
                offer_id="standin-cpu",
                region="here",
                gpu_type=None,
                gpu_count=0,
                cpus=1,
                memory_gb=1,
                spot=False,
                price_per_hour=self.price,
            )
        ]

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        plan = bootstrap.plan
        stage = plan.stages[0] if plan.stages else None
        match = _SLEEP.match(stage.run) if stage is not None else None
        body = {
            "key": key,
            "run_id": plan.run_id,
            "attempt": plan.attempt,
            "token": bootstrap.token,
            "stage": stage.name if stage else "main",
            "run_s": float(match.group(1)) if match else None,
        }
        return self._instance(offer, self._call("POST", "/admin/launch", json=body))

    def _instance(self, offer: Offer, data: dict[str, Any]) -> Instance:
        return Instance(
            provider=self.name,
            instance_id=data["instance_id"],
            key=data["key"],
            offer=offer,
            endpoint=data["endpoint"],
            data={"state": data["state"], "run_id": data["run_id"]},
        )

    def _listed(self, key: str) -> dict[str, Any] | None:
        """The machine ``key`` from a listing of every machine no older than the cache
        time (one request refreshes it for every caller)."""
        with self._listing_lock:
            now = time.monotonic()
            if self._listing is None or now - self._listing[0] >= self._cache_s:
                listed = self._call("GET", "/admin/instances")
                self._listing = (now, {d["key"]: d for d in listed})
            return self._listing[1].get(key)

    def _forget_listing(self) -> None:
        with self._listing_lock:
            self._listing = None

    def status(self, instance: Instance) -> InstanceStatus:
        data = self._listed(instance.key) if self._cache_s > 0 else None
        if data is None:  # launched since the listing, or no cache: ask for it alone
            try:
                data = self._call("GET", f"/admin/instances/{instance.key}")
            except NotFound:
                data = None
        return _status(instance, data)

    def statuses(self) -> StatusListing[dict[str, Any]]:
        """Every machine's status from one listing (``SupportsStatusListing``): the server
        answers every machine at once, so the listing is complete."""
        listed = {d["key"]: d for d in self._call("GET", "/admin/instances")}
        return StatusListing(listed, _status, complete=True, id_of=lambda inst: inst.key)

    def terminate(self, instance: Instance) -> None:
        self._call("POST", f"/admin/terminate/{instance.key}")
        self._forget_listing()

    def preempt(self, instance: Instance, grace: float = 5.0) -> None:
        self._call("POST", f"/admin/preempt/{instance.key}", json={"grace": grace})
        self._forget_listing()

    def find(self, key: str) -> Instance | None:
        try:
            data = self._call("GET", f"/admin/instances/{key}")
        except NotFound:
            return None
        return self._instance(self.offers(Requirements())[0], data)

    def list_instances(self) -> list[Instance]:
        offer = self.offers(Requirements())[0]
        return [
            self._instance(offer, d)
            for d in self._call("GET", "/admin/instances")
            if d["state"] != "terminated"
        ]


_STATES = {
    "running": InstanceState.RUNNING,
    "preempted": InstanceState.PREEMPTED,
    "terminated": InstanceState.TERMINATED,
}


def _status(instance: Instance, data: dict[str, Any] | None) -> InstanceStatus:
    """The machine's status from the server's record of it (None: the server does not know
    it, its 404): what both ``status`` and a listing say."""
    if data is None:
        return InstanceStatus(state=InstanceState.TERMINATED)
    return InstanceStatus(state=_STATES[data["state"]], endpoint=data["endpoint"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corral.testing.standin")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--run-s", type=float, default=Config.run_s)
    parser.add_argument("--log-every-s", type=float, default=Config.log_every_s)
    parser.add_argument("--progress-every-s", type=float, default=Config.progress_every_s)
    args = parser.parse_args(argv)
    cfg = Config(
        run_s=args.run_s, log_every_s=args.log_every_s, progress_every_s=args.progress_every_s
    )
    srv = StandInServer(("127.0.0.1", args.port), cfg)
    args.ready_file.write_text(srv.url)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
