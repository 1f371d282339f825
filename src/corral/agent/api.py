"""What the agent's endpoints answer, without HTTP: the runner's state, events, logs, GPU
readings, the code bundle, packaged artifacts and the stop (``docs/agent.md``).
:mod:`corral.agent.server` parses requests and serialises these answers."""

from __future__ import annotations

import hmac
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from corral import __version__
from corral.agent import logs
from corral.agent.events import EventLog
from corral.agent.execs import ExecSessions
from corral.agent.launchers import for_this_node
from corral.agent.progress import ProgressTailer
from corral.agent.runner import SETUP, Runner
from corral.agent.services import Services
from corral.errors import BadInput
from corral.secrets.redact import Redactor
from corral.wire import WIRE_VERSION
from corral.wire.events import EventsPage
from corral.wire.gang import GangRole, GangStart
from corral.wire.outcome import StopCause
from corral.wire.plan import AgentPlan
from corral.wire.poll import (
    MAX_POLL_EVENTS,
    POLL_FEATURE,
    POLL_VERSION,
    LogChunk,
    LogSizes,
    PollAnswer,
    StageLogChunk,
)
from corral.wire.status import AgentStatus

GPU_USAGE_TTL = 5.0


def _mismatch(exc: BadInput) -> bool:
    """Whether ``exc`` says the received bytes are not the announced bundle (the bundle code
    is loaded only when code is shipped: an agent without any starts without it)."""
    from corral.bundle.unpack import Mismatch

    return isinstance(exc, Mismatch)


#: a GPU below this utilisation (percent) counts as "at zero" for ``zero_util_s``
ZERO_UTIL_PCT = 1.0
MAX_EVENTS_PAGE = 1000
#: what a name under /artifacts/ may look like (no separators, no "..")
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*\.tar\.gz$")


@dataclass(frozen=True)
class Handover:
    """The next attempt of this node's run, as the controller handed it over."""

    plan: AgentPlan
    token: str
    gang: GangRole | None

    @classmethod
    def from_body(cls, body: dict[str, Any], current: AgentPlan) -> Handover:
        """The hand-over in ``body`` for a node that runs ``current``; BadInput naming what is
        wrong (another run, an attempt not after this one, another wire version, ...)."""
        raw, token, gang = body.get("plan"), body.get("token"), body.get("gang")
        if not isinstance(raw, dict):
            raise BadInput("plan: expected the next attempt's plan (a JSON object)")
        if raw.get("wire_version") != WIRE_VERSION:
            raise BadInput(
                f"plan: wire version {raw.get('wire_version')}; this agent speaks {WIRE_VERSION}"
            )
        if not isinstance(token, str) or not token:
            raise BadInput("token: expected the next attempt's token")
        try:
            plan = AgentPlan.model_validate(raw)
            role = GangRole.model_validate(gang) if gang is not None else None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "plan"
            raise BadInput(f"{where}: {first['msg']}") from None
        if plan.run_id != current.run_id:
            raise BadInput(f"plan: run {plan.run_id}, this node runs {current.run_id}")
        if plan.attempt <= current.attempt:
            raise BadInput(
                f"plan: attempt {plan.attempt} is not after this node's {current.attempt}"
            )
        return cls(for_this_node(plan, role, "POST /attempt"), token, role)

    def same(self, body: dict[str, Any]) -> bool:
        """Whether ``body`` asks for this very hand-over again: the same run and attempt with
        the same token (the token compared in constant time)."""
        return handed_over_in(body, self.plan, self.token)


def handed_over_in(body: dict[str, Any], plan: AgentPlan, token: str) -> bool:
    """Whether the ``POST /attempt`` body ``body`` hands over ``plan``'s run and attempt with
    ``token``: what the controller sends again when it lost the answer to a hand-over."""
    raw, given = body.get("plan"), body.get("token")
    if not isinstance(raw, dict) or not isinstance(given, str) or not given:
        return False
    attempt = raw.get("attempt")
    if raw.get("run_id") != plan.run_id or isinstance(attempt, bool) or attempt != plan.attempt:
        return False
    return hmac.compare_digest(given.encode(), token.encode())


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
        sample: Callable[[list[str]], list[Any]] | None = None,
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
        self._sample = sample or _sample_gpus
        self._sample_cache: tuple[float, list[dict]] | None = None
        #: monotonic time since which each GPU held by a running stage has read zero
        self._zero_since: dict[str, float] = {}
        self.ready = False
        #: the job's secret values, masked in every answer (values and keys)
        self.redactor = Redactor(v.decode("utf-8", "replace") for v in runner.secret_values())
        #: monotonic time of the last authenticated request (for "is the controller gone?").
        self.last_request_at: float | None = None
        #: set once a controller has read every event of an attempt that had ended: what a
        #: signalled agent waits for before it exits (its last words are not lost)
        self.collected = threading.Event()
        #: the next attempt this node runs, handed over by the controller (``POST /attempt``:
        #: a gang's node kept through a repair); set once, read by the agent's main loop
        self.handover: Handover | None = None
        self.handed_over = threading.Event()
        #: commands run on the node for ``corral exec`` (POST /exec)
        self.execs = ExecSessions(
            runner.state_dir / "exec",
            runner.plan.workdir,
            runner.command_env,
            runner.secret_values(),
            clock=clock,
        )
        #: the plan's service stages: health and the way in (/services/<stage>/...)
        self.services = Services(runner.plan, runner.stage_running)

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
            "features": {POLL_FEATURE: POLL_VERSION},
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

    def status(self) -> AgentStatus:
        """``GET /status``: the runner's status (its hooks' sections with it), the GPUs, the
        last checkpoint and the services, as the wire model (:mod:`corral.wire.status`)."""
        raw = self.runner.status()
        gpus = self.gpus()
        self._note_utilisation(gpus, _holders(raw))
        raw["gpus"] = gpus
        raw["last_checkpoint"] = self.tailer.last_checkpoint()
        if self.services:
            raw["services"] = self.services.status()
        return AgentStatus.model_validate(raw)

    def _note_utilisation(self, rows: list[dict], holders: dict[str, str]) -> None:
        """Remember since when each GPU a running stage holds has read (about) zero; a GPU
        that works, or that no running stage holds, starts again from nothing."""
        now = self._clock()
        with self._gpu_lock:
            for row in rows:
                gid = str(row.get("id"))
                util = row.get("utilization_pct")
                if gid in holders and isinstance(util, int | float) and util < ZERO_UTIL_PCT:
                    self._zero_since.setdefault(gid, now)
                else:
                    self._zero_since.pop(gid, None)
            for gid in [g for g in self._zero_since if g not in holders]:
                del self._zero_since[gid]

    def gpu_report(self) -> dict:
        """``GET /gpus``: every GPU of this attempt as it reads now (at most
        :data:`GPU_USAGE_TTL` old), with the running stage that holds it and the seconds it
        has read zero utilisation while held (None when it works or is free)."""
        with self._gpu_lock:
            now = self._clock()
            if self._sample_cache is None or now - self._sample_cache[0] >= GPU_USAGE_TTL:
                try:
                    rows = [g.to_dict() for g in self._sample(self.gpu_ids)]
                except Exception:  # informative only: an empty list, never a failed request
                    rows = []
                self._sample_cache = (now, rows)
            rows = [dict(r) for r in self._sample_cache[1]]
        holders = _holders(self.runner.status())
        self._note_utilisation(rows, holders)
        now = self._clock()
        for row in rows:
            gid = str(row["id"])
            row["stage"] = holders.get(gid)
            since = self._zero_since.get(gid)
            row["zero_util_s"] = round(now - since, 1) if since is not None else None
        return {
            "run_id": self.runner.plan.run_id,
            "attempt": self.runner.plan.attempt,
            "running_stages": sorted(set(holders.values())),
            "gpus": rows,
            "wire_version": WIRE_VERSION,
        }

    def events_after(self, after: int, limit: int) -> EventsPage:
        ended = self.runner.finished.is_set()  # before the read: no event of the end missed
        page, next_after = self.events.after(after, limit)
        if ended and len(page) < limit:
            self.collected.set()
        return EventsPage.model_validate({"events": page, "next": next_after})

    def log_names(self) -> list[str]:
        names = [s.name for s in self.runner.plan.stages]
        return [SETUP, *names] if self.runner.plan.setup else names

    def log_sizes(self) -> LogSizes:
        directory = self.runner.logs_dir
        return LogSizes(stages={n: logs.log_size(directory / f"{n}.log") for n in self.log_names()})

    def log_chunk(self, stage: str, offset: int, limit: int) -> StageLogChunk:
        if stage not in self.log_names():
            raise HttpError(404, f"unknown stage {stage!r}")
        finished = self.runner.stage_finished(stage)  # read before the file: no lost tail
        path = self.runner.logs_dir / f"{stage}.log"
        data, next_offset = logs.read_chunk(path, offset, limit)
        eof = finished and next_offset >= logs.log_size(path)
        return StageLogChunk(
            stage=stage,
            offset=offset,
            next_offset=next_offset,
            data=data.decode("utf-8", errors="replace"),
            eof=eof,
        )

    def poll(self, events_after: int, offsets: dict[str, int], log_limit: int) -> PollAnswer:
        """``GET /poll``: the status, then the events after ``events_after``, then the bytes
        of every stage log past the controller's offset (``offsets``; 0 for a stage not
        named), at most ``log_limit`` bytes in all (:mod:`corral.wire.poll`). Read in that
        order, so the events and logs reach at least as far as the status says."""
        ended = self.runner.finished.is_set()  # before the reads: nothing of the end missed
        status = self.status()
        events, events_next = self.events.after(events_after, MAX_POLL_EVENTS)
        more = len(events) >= MAX_POLL_EVENTS
        chunks: dict[str, LogChunk] = {}
        sizes: dict[str, int] = {}
        budget = log_limit
        directory = self.runner.logs_dir
        for name in self.log_names():
            path = directory / f"{name}.log"
            size = logs.log_size(path)
            sizes[name] = size
            offset = min(offsets.get(name, 0), size)
            if offset >= size:
                continue
            if budget <= 0:
                more = True
                continue
            finished = self.runner.stage_finished(name)  # before the read: no lost tail
            data, next_offset = logs.read_chunk(path, offset, budget)
            if next_offset <= offset:
                continue  # a partial line being written: it comes with the next poll
            if budget < log_limit and not data.endswith(b"\n"):
                more = True  # a line longer than what is left: whole, in the next answer
                continue
            budget -= next_offset - offset
            more = more or next_offset < size
            chunks[name] = LogChunk(
                offset=offset,
                next_offset=next_offset,
                data=data.decode("utf-8", errors="replace"),
                eof=finished and next_offset >= logs.log_size(path),
            )
        if ended and not more:
            self.collected.set()
        # one validation for the whole answer (the events are the agent's own records)
        return PollAnswer.model_validate(
            {
                "wire_version": WIRE_VERSION,
                "status": status,
                "events": events,
                "events_next": events_next,
                "logs": chunks,
                "log_sizes": sizes,
                "more": more,
            }
        )

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

    def start_gang(self, body: dict[str, Any]) -> dict:
        """``POST /gang/start`` with an optional JSON body ``{"nodes": [...]}`` (the gang's
        nodes in every attempt so far: :class:`~corral.wire.gang.GangStart`, for the
        manifest): every node of the gang is there, its stages on several nodes start. 400
        for a body that is not one, naming the field."""
        try:
            start = GangStart.model_validate(body)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "body"
            raise HttpError(400, f"{where}: {err['msg']}") from None
        runner = self.runner
        return {"started": runner.start_gang(start.nodes) or runner.gang_started.is_set()}

    def hand_over(self, body: dict[str, Any]) -> dict:
        """``POST /attempt`` ``{"plan": {...}, "token": "...", "gang": {...}}``: this node runs
        the run's next attempt once this one has ended (a gang repaired around it: the machine
        is kept, only its attempt changes). 409 while this attempt runs or after a hand-over
        to another attempt or token; the same hand-over again (a controller that lost the
        answer asks again) is answered as the first was; 400 for a plan this node cannot run,
        saying why."""
        if not self.runner.finished.is_set():
            raise HttpError(409, "this attempt still runs: stop it first")
        if self.handover is not None:
            if self.handover.same(body):
                return {"attempt": self.handover.plan.attempt}
            raise HttpError(409, f"attempt {self.handover.plan.attempt} was handed over already")
        try:
            handover = Handover.from_body(body, self.runner.plan)
        except BadInput as exc:
            raise HttpError(400, exc.message) from None
        self.handover = handover
        self.handed_over.set()
        return {"attempt": handover.plan.attempt}

    def code(self) -> dict:
        """``GET /code``: where the attempt's code stands (404: the plan ships none)."""
        if self.runner.code is None:
            raise HttpError(404, "this attempt's code is not shipped")
        return self.runner.code.status()

    def code_upload(self, sha256: str, offset: int, chunks: Callable[[], bytes]) -> dict:
        """``PUT /code/<sha256>?offset=N``: the next bytes of the bundle."""
        stage = self.runner.code
        if stage is None:
            raise HttpError(404, "this attempt's code is not shipped")
        try:
            return stage.receive(sha256, offset, chunks)
        except LookupError as exc:
            raise HttpError(409, str(exc)) from None
        except BadInput as exc:  # the bundle's bytes are not the ones announced: 422
            raise HttpError(422 if _mismatch(exc) else 409, exc.message) from None

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


def _holders(status: dict) -> dict[str, str]:
    """Physical GPU id -> the running stage that holds it, from the runner's status."""
    return {
        str(gid): str(stage["name"])
        for stage in status.get("stages", [])
        if stage.get("state") == "running"
        for gid in stage.get("gpus") or []
    }


def _sample_gpus(ids: list[str]) -> list[Any]:
    # lazy for start-up speed (first /gpus); no cycle: corral.gpu imports no agent module
    from corral import gpu

    return gpu.sample(ids)
