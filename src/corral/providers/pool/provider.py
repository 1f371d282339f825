"""The pool provider: a launch enqueues the attempt for the pool's GPU workers.

* ``offers``: one per queue (GPU type x count) the pool's workers serve or have served, at
  ``CORRAL_POOL_PRICE_PER_GPU_HOUR`` per GPU, with the free and waiting counts. A queue
  without a live worker still takes runs (workers may be scaled up from zero).
* ``launch``: the attempt's record and bootstrap go to Redis, then the task to its queue with
  the run's priority and its time limits; idempotent on the launch key (a relaunch finds the
  record and sends the task only if it was never sent).
* ``status``: from the record the task keeps (queued, claimed, running with the agent's
  endpoint, ended) and its heartbeat: an attempt whose worker stopped beating for
  ``lost_after_s`` is declared lost, a preempted machine to the controller, which recovers the
  run from its last checkpoint on another worker.
* ``terminate``: a queued attempt is cancelled (and its task revoked); a running one is asked
  to stop, and its task stops the agent gracefully (SIGTERM, the SDK checkpoints, SIGKILL after
  the grace period): ``NotYetTerminated`` until it has.
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar

from corral.errors import (
    BadInput,
    Conflict,
    InfeasibleRequest,
    MaybeLaunched,
    NotFound,
    NotYetTerminated,
    ProviderError,
    ProviderUnavailable,
)
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    NodeProfile,
    Offer,
    Provider,
    ReportsQueue,
    Requirements,
    SupportsSimulatedPreemption,
)
from corral.providers.common.files import check_key
from corral.providers.pool.gang import PoolGangs, head_address, lease_port, renew_port
from corral.queue import attempts as states
from corral.queue.app import TASK_NAME
from corral.queue.attempts import AttemptStore, PoolAttempt
from corral.queue.client import EXTRA_HINT, broker_errors, connect
from corral.queue.keys import Keys, broker_priority
from corral.queue.registry import QueueInfo, Registry, WorkerInfo
from corral.queue.send import send_task, task_message
from corral.queue.settings import ENV_MAX_RUNTIME, PoolSettings
from corral.wire.env import DEFAULT_GRACE_SECONDS

#: where a worker keeps the runs whose code is shipped to it (under its root)
NODE_RUNS = "/corral/runs"
#: a code bundle up to this size travels inside the task (base64 in the plan, through the
#: broker): the worker's agent has its code at boot, with no upload after it answers
INLINE_CODE_MAX = 256 * 1024

#: how soon the controller looks again at an attempt a worker has claimed (its agent is
#: starting: it answers within a second or so, and a look is one read from Redis)
STARTING_LOOK_S = 0.1

#: an unknown attempt older than this is the leak sweep's (younger: a launch in flight)
SWEEP_MIN_AGE_S = 600.0

_TASK_NS = uuid.UUID("6f1c9a52-2f37-4f43-9f0c-3a1d2f5e8b10")


def task_id(pool: str, key: str) -> str:
    """The Celery task id of an attempt: the same for every send of one launch key."""
    return str(uuid.uuid5(_TASK_NS, f"{pool}:{key}"))


def _fits_cpus(q: QueueInfo, req: Requirements) -> bool:
    if req.cpus is not None and q.cpus and req.cpus > q.cpus:
        return False
    return not (req.memory_gb is not None and q.memory_gb and req.memory_gb > q.memory_gb)


def _queue_text(q: QueueInfo) -> str:
    return f"{q.gpu_type} x{q.count}" if q.count else "CPU jobs"


def _dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


class PoolProvider(Provider, SupportsSimulatedPreemption, ReportsQueue, PoolGangs):
    """The pool's GPU workers, through their Celery queues on Redis."""

    name: ClassVar[str] = "pool"
    shared_machines: ClassVar[bool] = True
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsSpot": "the pool's GPUs are the team's own: nobody takes them back",
        "SupportsStop": "a pool attempt holds no paid machine: stop it and launch again",
        "SupportsVolumes": (
            "workers keep no volumes: share the checkpoint directory or set checkpoints.storage"
        ),
        "SupportsPreemptionNotice": (
            "a worker that goes away gives no notice: its run resumes from its last checkpoint"
        ),
        "SupportsLogs": "the worker keeps its agent's log on its own disk; the agent serves the stage logs",
    }

    def __init__(
        self,
        settings: PoolSettings | None = None,
        client: Any = None,
        app: Any = None,
        clock: Callable[[], float] = time.time,
    ):
        if client is None and importlib.util.find_spec("redis") is None:
            raise ProviderError(f"the worker pool needs the queue extra: {EXTRA_HINT}")
        self.settings = settings or PoolSettings.from_env()
        self.keys = Keys(self.settings.name)
        self.clock = clock
        self._client = client
        self._app = app
        self._attempts: AttemptStore | None = None
        self._registry: Registry | None = None
        #: when (this clock) a call to the broker last failed: a broker back from an outage
        #: gives every worker ``lost_after_s`` to be heard again before any attempt is lost
        self._broker_failed_at: float | None = None

    # --- connections (made on first use) ----------------------------------------------------

    @property
    def attempts(self) -> AttemptStore:
        if self._attempts is None:
            if self._client is None:
                self._client = connect(self.settings)
            self._attempts = AttemptStore(self._client, self.keys, self.clock)
        return self._attempts

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry(self.attempts.r, self.keys, self.clock)
        return self._registry

    @property
    def app(self) -> Any:
        if self._app is None:
            from corral.queue.app import make_app  # imports Celery: only to revoke

            self._app = make_app(self.settings)
        return self._app

    # --- offers -----------------------------------------------------------------------------

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        if req.regions is not None and self.settings.name not in req.regions:
            return []
        if req.spot:
            raise InfeasibleRequest("the pool has no spot machines")
        if req.max_runtime_s and req.max_runtime_s > self.settings.max_runtime_s:
            raise InfeasibleRequest(
                f"the job's max_runtime ({req.max_runtime_s:g}s) is longer than the pool "
                f"allows ({self.settings.max_runtime_s:g}s, {ENV_MAX_RUNTIME})"
            )
        with broker_errors(self.settings):
            queues = self.registry.queues()
            workers = self.registry.workers()
            fits = [q for q in queues if self._fits(q, req)]
            waiting = {q.queue: self.registry.waiting(q.queue) for q in fits}
        if not fits:
            raise InfeasibleRequest(self._no_fit(queues, req))
        out = []
        for q in fits:
            live = [w for w in workers if w.queue == q.queue]
            free = [w for w in live if not w.busy]
            price = round(self.settings.price_per_gpu_hour * q.count, 6)
            if req.max_hourly_price is not None and price > req.max_hourly_price:
                continue
            out.append(self._offer(q, live, free, waiting[q.queue], price, req.nodes))
        # the smallest machine that fits first, then the one with free GPUs
        return sorted(out, key=lambda o: (o.gpu_count, -o.details["workers_free"]))

    @staticmethod
    def _fits(q: QueueInfo, req: Requirements) -> bool:
        top = max(req.gpu_count_max, req.gpu_count_min)
        if q.count == 0:  # the CPU workers' queue: jobs that ask for no GPU
            return _fits_cpus(q, req) if req.gpu_count_min == 0 else False
        if req.gpu_type and q.gpu_type.strip().lower() != req.gpu_type.strip().lower():
            return False
        if not req.gpu_count_min <= q.count <= top:
            return False
        return _fits_cpus(q, req)

    def _no_fit(self, queues: list[QueueInfo], req: Requirements) -> str:
        if not queues:
            return (
                f"no worker has joined the pool {self.settings.name!r} yet "
                "(start one with `corral worker` on a GPU machine)"
            )
        have = ", ".join(_queue_text(q) for q in queues)
        if max(req.gpu_count_min, req.gpu_count_max) == 0:
            if any(q.count == 0 for q in queues):
                return f"the pool's workers serve {have}; the job asks for more CPUs or memory"
            return (
                f"the pool's workers serve {have}; the job asks for no GPU and no CPU worker "
                "has joined (`corral worker --cpu-slots N`)"
            )
        want = f"{req.gpu_type or 'any'} x{req.gpu_count_min}"
        if req.gpu_count_max > req.gpu_count_min:
            want += f"-{req.gpu_count_max}"
        return f"the pool's workers serve {have}; the job asks for {want}"

    def _offer(
        self,
        q: QueueInfo,
        live: list[WorkerInfo],
        free: list[WorkerInfo],
        waiting: int,
        price: float,
        nodes: int = 1,
    ) -> Offer:
        availability = "high" if free else ("low" if live else "none")
        hosts = len({w.host for w in live})
        if nodes > 1 and len({w.host for w in free}) < nodes:  # a gang: N distinct hosts
            availability = "low" if hosts >= nodes else "none"
        return Offer(
            provider=self.name,
            offer_id=q.queue,
            region=self.settings.name,
            gpu_type=q.gpu_type if q.count else None,
            gpu_count=q.count,
            cpus=q.cpus or None,
            memory_gb=q.memory_gb or None,
            spot=False,
            price_per_hour=price,
            available=True,  # the queue holds the run until a worker is free
            availability=availability,
            details={
                "queue": q.queue,
                "workers": len(live),
                "workers_free": len(free),
                "hosts": hosts,
                "gpus_free": len(free) * q.count,
                "waiting": waiting,
            },
        )

    # --- launch -----------------------------------------------------------------------------

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        """A worker runs on a machine of its own: the code is shipped to
        ``/corral/runs/<run id>/work`` under the worker's root (checkpoints beside it: set
        ``checkpoints.storage`` to resume on another machine), unless the workers share this
        machine's files (``CORRAL_POOL_SHARED_FILES=1``: the job runs in its workdir in
        place). A job with ``image:`` runs in it through the worker machine's container engine
        (``corral.wire.container``), or its attempt fails saying there is none."""
        if self.settings.shared_files:
            return NodeProfile(container_engine="auto")
        # a small bundle rides in the task itself: the job starts without an upload
        return NodeProfile(
            workdir=f"{NODE_RUNS}/{run_id}/work",
            inline_code_max=INLINE_CODE_MAX,
            container_engine="auto",
        )

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        check_key(key)
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the pool provider")
        queue = offer.offer_id
        if not queue.startswith(f"{self.settings.name}."):
            raise BadInput(f"offer {queue!r} is not a queue of the pool {self.settings.name!r}")
        tid = task_id(self.settings.name, key)
        grace = bootstrap.plan.longest_grace()
        if (
            bootstrap.image is not None and bootstrap.image.agent_env()
        ):  # the worker's agent logs in
            bootstrap = bootstrap.model_copy(
                update={"env": {**bootstrap.env, **bootstrap.image.agent_env()}}
            )
        fields: dict[str, Any] = {
            "run_id": bootstrap.plan.run_id,
            "attempt": bootstrap.plan.attempt,
            "queue": queue,
            "priority": bootstrap.priority,
            "task_id": tid,
            "grace": grace,
            "outage_grace": self.settings.outage_grace_s,
        }
        if bootstrap.gang is not None:  # a node of a gang: never beside another on one host
            fields.update(gang=bootstrap.plan.run_id, rank=bootstrap.gang.rank)
        with broker_errors(self.settings):
            rec, _ = self.attempts.create(
                key,
                fields=fields,
                bootstrap=bootstrap.model_dump_json(include={"plan", "token", "env"}),
                ttl_s=self.settings.visibility_timeout_s,
            )
        if rec.state == states.QUEUED and not rec.sent:
            self._send(key, rec, bootstrap, grace)
        return self._instance(rec, offer)

    def _send(self, key: str, rec: PoolAttempt, bootstrap: Bootstrap, grace: float) -> None:
        soft, hard = self.settings.time_limits(bootstrap.max_runtime_s, grace)
        message = task_message(
            TASK_NAME,
            rec.task_id,
            [key],
            queue=rec.queue,
            priority=broker_priority(rec.priority),
            soft_time_limit=soft,
            time_limit=hard,
        )
        try:  # Celery's message, without importing Celery (``corral.queue.send``)
            send_task(self.attempts.r, self.keys, message)
        except Exception as exc:  # the broker's errors: the send may or may not have happened
            raise MaybeLaunched(
                f"the pool's broker did not take attempt {key}: {type(exc).__name__}"
            ) from None
        with broker_errors(self.settings):
            self.attempts.mark_sent(key)

    def _instance(self, rec: PoolAttempt, offer: Offer | None = None) -> Instance:
        if offer is None:
            offer = Offer(
                provider=self.name,
                offer_id=rec.queue,
                region=self.settings.name,
                price_per_hour=0.0,
            )
        return Instance(
            provider=self.name,
            instance_id=f"pool-{rec.task_id[:13]}",
            key=rec.key,
            offer=offer,
            endpoint=rec.endpoint or None,
            created_at=_dt(rec.created_at),
            data={
                "pool": self.settings.name,
                "queue": rec.queue,
                "task_id": rec.task_id,
                "priority": rec.priority,
                "worker": rec.worker,
            },
        )

    # --- gangs (``providers.pool.gang``) -------------------------------------------------

    def gang_port(self, run_id: str) -> int:
        with broker_errors(self.settings):
            return lease_port(self.attempts.r, self.keys, run_id)

    def gang_address(self, head: Instance) -> str:
        try:
            with broker_errors(self.settings):
                return head_address(self.attempts.get(head.key))
        except ProviderError:  # the broker is away: the other nodes wait for its answer
            return ""

    # --- status / terminate -----------------------------------------------------------------

    def _read(self, key: str) -> PoolAttempt | None:
        """The record, with a held attempt whose heartbeat stopped declared lost, unless the
        broker itself has not been up for ``lost_after_s`` (a broker outage silences every
        worker: they are given that long to be heard again)."""
        try:
            with broker_errors(self.settings):
                rec = self.attempts.get(key)
                if rec is not None and rec.held and not rec.alive and self._broker_steady():
                    lost = self.settings.lost_after_s
                    why = f"worker {rec.worker} lost: no heartbeat for {lost:g}s"
                    self.attempts.mark_lost(key, why)
                    rec = self.attempts.get(key)
        except ProviderUnavailable:
            self._broker_failed_at = time.monotonic()
            raise
        return rec

    def _broker_steady(self) -> bool:
        """Whether the broker has answered for at least ``lost_after_s``: since this
        controller last failed to reach it, and since the broker itself started (a restart
        this controller never saw)."""
        need = self.settings.lost_after_s
        if self._broker_failed_at is not None and time.monotonic() - self._broker_failed_at < need:
            return False
        uptime = self.attempts.r.info("server").get("uptime_in_seconds")
        return not isinstance(uptime, int | float) or uptime >= need

    def _fenced(self, rec: PoolAttempt) -> bool:
        """Whether a lost attempt's worker may still be running its job (cut off from the
        broker, it keeps it going for the attempt's outage grace): its run is not recovered
        before that has surely passed, so the job never runs twice at once."""
        grace = rec.outage_grace if rec.outage_grace is not None else 0.0
        fence = max(0.0, grace - self.settings.lost_after_s) + self.settings.heartbeat_s
        return rec.ended_at is not None and self.clock() < rec.ended_at + fence

    def status(self, instance: Instance) -> InstanceStatus:
        rec = self._read(instance.key)
        if rec is None:
            return InstanceStatus(state=InstanceState.TERMINATED, detail="no such attempt")
        if rec.gang and rec.rank == 0 and rec.state not in states.ENDED:
            with broker_errors(self.settings):  # its gang's port stays leased while it lives
                renew_port(self.attempts.r, self.keys, rec.gang)
        if rec.state == states.QUEUED:
            return InstanceStatus(
                state=InstanceState.PROVISIONING,
                detail=f"queued on {rec.queue} (corral pool status shows the queue)",
                queued=True,
            )
        started = _dt(rec.claimed_at)
        limit = rec.limit or None  # the job was killed for going over its worker's limit
        if rec.state == states.PREEMPTED or (rec.held and rec.preempted):
            return InstanceStatus(
                state=InstanceState.PREEMPTED,
                detail=rec.detail or f"worker {rec.worker} is being taken away",
                endpoint=rec.endpoint or None,
                started_at=started,
            )
        if rec.state == states.CLAIMED:
            return InstanceStatus(
                state=InstanceState.PROVISIONING,
                detail=f"starting on worker {rec.worker}",
                started_at=started,
                look_again_s=STARTING_LOOK_S,  # its agent answers within a second or so
            )
        if rec.state == states.RUNNING:
            return InstanceStatus(
                state=InstanceState.RUNNING,
                detail=f"on worker {rec.worker}" + (f" (GPU {rec.gpus})" if rec.gpus else ""),
                endpoint=rec.endpoint or None,
                started_at=started,
                limit=limit,
            )
        if rec.state == states.LOST:
            if self._fenced(rec):
                return InstanceStatus(
                    state=InstanceState.UNKNOWN,
                    detail=f"{rec.detail}; waiting out its outage grace in case the worker, "
                    "cut off from the broker, still runs the job",
                    started_at=started,
                )
            return InstanceStatus(
                state=InstanceState.PREEMPTED, detail=rec.detail, started_at=started
            )
        if rec.state == states.FAILED:
            return InstanceStatus(
                state=InstanceState.FAILED, detail=rec.detail, started_at=started, limit=limit
            )
        detail = rec.detail + (f" (exit {rec.exit_code})" if rec.exit_code is not None else "")
        return InstanceStatus(
            state=InstanceState.TERMINATED, detail=detail, started_at=started, limit=limit
        )

    def terminate(self, instance: Instance) -> None:
        rec = self._read(instance.key)
        if rec is None or rec.state in states.ENDED:
            return
        grace = rec.grace if rec.grace is not None else DEFAULT_GRACE_SECONDS
        with broker_errors(self.settings):
            was = self.attempts.cancel(instance.key, grace)
        if rec.stop_grace is None:  # first call: keep the broker from delivering it later
            self._revoke(rec.task_id)
        if was not in states.HELD:
            return
        rec = self._read(instance.key)
        if rec is None or rec.state in states.ENDED:
            return
        raise NotYetTerminated(f"the pool's worker {rec.worker} is stopping attempt {rec.key}")

    def preempt(self, instance: Instance, grace: float = 5.0) -> None:
        """Take the attempt's worker away, as ``corral worker`` does when stopped twice: its
        task stops the agent gracefully (SIGTERM, SIGKILL after ``grace``) and the attempt ends
        ``preempted``; :meth:`status` says PREEMPTED from now on. A queued attempt is simply
        cancelled (it never ran)."""
        rec = self._read(instance.key)
        if rec is None:
            raise NotFound(f"no pool attempt with key {instance.key!r}")
        if rec.state in states.ENDED:
            raise Conflict(f"pool attempt {rec.key} is {rec.state}; nothing to preempt")
        with broker_errors(self.settings):
            if rec.state == states.QUEUED:
                self.attempts.cancel(instance.key, grace)
            else:
                self.attempts.preempt(instance.key, grace)

    def _revoke(self, tid: str) -> None:
        """Revoke the task (no terminate: the attempt's own stop is graceful and works with
        any worker pool); best effort, the attempt's record already refuses a late delivery."""
        try:
            self.app.control.revoke(tid)
        except Exception:
            pass

    # --- lookups ----------------------------------------------------------------------------

    def find(self, key: str) -> Instance | None:
        rec = self._read(key)
        return None if rec is None else self._instance(rec)

    def _all(self) -> list[PoolAttempt]:
        out = []
        with broker_errors(self.settings):
            prefix = self.keys.attempt("")
            for name in self.attempts.r.scan_iter(match=prefix + "*", count=500):
                rec = self.attempts.get(name[len(prefix) :])
                if rec is not None:
                    out.append(rec)
        return out

    def list_instances(self) -> list[Instance]:
        """Attempts queued or held by a worker."""
        return [self._instance(r) for r in self._all() if r.state not in states.ENDED]

    def sweep(
        self, active_keys: Iterable[str], active_runs: Iterable[str] | None = None
    ) -> list[str]:
        """Cancel or stop attempts no open resource row knows (older than 10 minutes), and
        delete the bootstraps (the jobs' secrets) of attempts that ended or are gone."""
        known = set(active_keys)
        now = self.clock()
        with broker_errors(self.settings):
            self.attempts.sweep_boots()
        swept = []
        for rec in self._all():
            if rec.state in states.ENDED or rec.key in known:
                continue
            if rec.created_at is not None and now - rec.created_at < SWEEP_MIN_AGE_S:
                continue
            try:
                self.terminate(self._instance(rec))
            except Exception:
                pass  # a held one stops on its worker; the next sweep sees it ended
            swept.append(rec.key)
        return swept

    def queue_lengths(self) -> dict[str, int]:
        """Attempts waiting in each queue of the pool (``/metrics``: corral_queue_length)."""
        with broker_errors(self.settings):
            return {q.queue: self.registry.waiting(q.queue) for q in self.registry.queues()}

    def workers(self) -> list[WorkerInfo]:
        with broker_errors(self.settings):
            return self.registry.workers()
