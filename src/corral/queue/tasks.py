"""The pool's one task: claim an attempt, run its agent until the attempt is over, report.

The task runs in a process of its own (``worker_max_tasks_per_child=1``) that dies with its
worker. Its loop, every ``heartbeat_s / 4`` (at most 0.5 s):

* heartbeat: keep ``<pool>:alive:<key>`` fresh; a record that says ``lost`` (the controller
  gave the attempt up: this worker was silent too long) or no longer names this worker makes
  the task kill its agent at once, so a recovered attempt never runs beside it;
* the agent's endpoint, once its API listens, goes to the record (``running``);
* a stop request (the controller's terminate) stops the agent gracefully: SIGTERM, the SDK
  checkpoints, SIGKILL after the grace period;
* the agent's exit ends the attempt (``finished``);
* the job's memory, where the worker limits it (:mod:`corral.queue.limits`): past the limit the
  reason goes to the record (``limit``) first, then the job's processes are killed; the
  attempt ends ``failed`` with that reason, which the controller does not recover from.

A node of a multi-node job (a gang) is never run on a host that holds another node of its
gang: the claim refuses it (``same_host``) and the task puts it back at the end of its queue
(Celery's ``Reject(requeue=True)``), where a worker of another host takes it; it waits there
while no such worker is free (the controller's gang bound gives the gang up).

The Celery soft time limit (the job's ``limits.max_runtime`` plus the pool's start margin)
stops the agent gracefully too; the hard one kills the process, and the agent with it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from corral.errors import CorralError
from corral.queue import attempts as states
from corral.queue.app import TASK_NAME
from corral.queue.attempts import SAME_HOST, AttemptStore
from corral.queue.client import connect
from corral.queue.config import SlotConfig
from corral.queue.keys import Keys
from corral.queue.limits import AttemptLimits
from corral.queue.registry import Registry
from corral.queue.runner import AgentProcess, Bootstrap, WarmAgent
from corral.queue.settings import PoolSettings

log = logging.getLogger("corral.worker")

#: how often a starting agent is looked at for its port (then: the heartbeat's pace)
STARTING_POLL_S = 0.05
#: how long a worker holds a gang's node it may not run (its host holds another node of the
#: gang) before putting it back on the queue: a free worker of another host takes it meanwhile
GANG_REQUEUE_S = 1.0


def register(
    app: Any, settings: PoolSettings, slot: SlotConfig, warm: WarmAgent | None = None
) -> Any:
    """Define the attempt task on ``app`` for the worker ``slot`` (its attempt's agent is
    ``warm``'s, started while this worker was idle, where it can be)."""

    @app.task(name=TASK_NAME, bind=True, acks_late=True)
    def run_attempt(task: Any, key: str) -> dict[str, Any]:
        from celery.exceptions import Reject

        delivery = str(task.request.id or "")
        result = AttemptTask(settings, slot, delivery=delivery, warm=warm).run(key)
        if result.get("requeue"):  # back to its queue's end, for a worker of another host
            raise Reject(result["requeue"], requeue=True)
        return result

    return run_attempt


class AttemptTask:
    """One delivery of the attempt task on one worker."""

    def __init__(
        self,
        settings: PoolSettings,
        slot: SlotConfig,
        delivery: str = "",
        warm: WarmAgent | None = None,
    ):
        self.settings = settings
        self.slot = slot
        self.delivery = delivery
        self.warm = warm
        client = connect(settings)
        keys = Keys(settings.name)
        self.attempts = AttemptStore(client, keys)
        self.registry = Registry(client, keys)
        self.parent = os.getppid()
        self.poll_s = min(0.5, settings.heartbeat_s / 4)
        #: how long the job goes on while the broker cannot be reached: the launching
        #: controller's setting, from the attempt's record (its recovery waits that long)
        self.outage_grace_s = settings.lost_after_s / 2

    def run(self, key: str) -> dict[str, Any]:
        host = self.slot.host or socket.gethostname()
        claim = self.attempts.claim(
            key,
            worker=self.slot.name,
            host=host,
            lost_after_s=self.settings.lost_after_s,
            delivery=self.delivery,
        )
        if claim == SAME_HOST:  # a gang's node: never two of one gang on one host
            why = f"this host ({host}) holds another node of its gang"
            log.info("attempt %s: %s: put back on its queue", key, why)
            time.sleep(GANG_REQUEUE_S)  # the pace at which it goes round this host's workers
            return {"key": key, "requeue": why}
        if claim != "ok":  # a second delivery, a cancelled or unknown attempt: never run it
            log.warning("attempt %s is %s: this delivery is dropped", key, claim)
            self.attempts.note_duplicate(key, self.slot.name, claim, self.delivery)
            return {"key": key, "dropped": claim}
        record = self.attempts.get(key)
        run_id = record.run_id if record else ""
        if record is not None and record.outage_grace is not None:
            self.outage_grace_s = record.outage_grace
        ttl = 3 * self.settings.heartbeat_s
        self.registry.set_current(self.slot.name, ttl, key, run_id)
        try:
            return self._run(key)
        finally:
            self.registry.set_current(self.slot.name, ttl)

    def _fail(self, key: str, detail: str) -> dict[str, Any]:
        log.error("attempt %s failed on %s: %s", key, self.slot.name, detail)
        self.attempts.finish(key, self.slot.name, states.FAILED, detail)
        return {"key": key, "state": states.FAILED, "detail": detail}

    def _run(self, key: str) -> dict[str, Any]:
        raw = self.attempts.bootstrap(key)
        if raw is None:
            return self._fail(key, "its bootstrap is gone from the broker")
        try:
            boot = Bootstrap.parse(raw)
        except (ValueError, KeyError, TypeError) as exc:
            return self._fail(key, f"its bootstrap cannot be read ({type(exc).__name__})")
        agent = AgentProcess(
            Path(self.slot.home) / "attempts" / key,
            boot,
            gpus=list(self.slot.gpus),
            bind_host=self.slot.bind_host,
            advertise_host=self.slot.advertise_host,
            checkpoint_dir=self.slot.checkpoint_dir,
            root=self.slot.root,
            limits=self._limits(key),
        )
        agent.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            pid = agent.start(self.warm)
        except CorralError as exc:
            return self._fail(key, exc.message)
        except OSError as exc:
            return self._fail(key, f"cannot start the agent: {exc.strerror or exc}")
        self.attempts.update(key, pid=pid, gpus=",".join(self.slot.gpus))
        how = "warm agent" if agent.warm else "agent"
        log.info("attempt %s: %s %d started on %s", key, how, pid, self.slot.name)
        try:
            return self._watch(key, agent, boot.plan.longest_grace())
        finally:
            if agent.limits is not None:
                agent.limits.close()

    def _limits(self, key: str) -> AttemptLimits | None:
        slot = self.slot
        if slot.job_memory is None and slot.job_cpus is None:
            return None
        return AttemptLimits(slot.job_memory, slot.job_cpus, list(slot.cores), key)

    def _over_limit(self, key: str, agent: AgentProcess) -> str | None:
        """The reason when the job just went over its memory limit: written on the record
        before its processes are killed, so whoever sees the job end sees why."""
        reason = agent.over_limit()
        if reason is not None:
            self.attempts.update(key, limit=reason)
            agent.kill_job()
            log.error("attempt %s on %s: %s: its processes are killed", key, self.slot.name, reason)
        return reason

    def _watch(self, key: str, agent: AgentProcess, grace_s: float) -> dict[str, Any]:
        import redis
        from celery.exceptions import SoftTimeLimitExceeded

        endpoint: str | None = None
        detail = "the agent exited"
        limit: str | None = None
        heard = time.monotonic()
        try:
            while True:
                if os.getppid() != self.parent:  # the worker died: so does its machine
                    agent.kill()
                    os._exit(1)
                try:
                    state, stop_grace = self.attempts.heartbeat(
                        key, self.slot.name, self.settings.lost_after_s
                    )
                    heard = time.monotonic()
                except redis.RedisError as exc:
                    # a broker outage: the job goes on for the attempt's outage grace (the
                    # controller recovers a lost attempt only after that), then stops, so it
                    # never runs beside its recovery
                    if time.monotonic() - heard < self.outage_grace_s:
                        log.warning("attempt %s: heartbeat failed: %s", key, exc)
                        time.sleep(self.poll_s)
                        continue
                    log.error(
                        "attempt %s: the broker has been unreachable for %.0fs: killing its agent",
                        key,
                        self.outage_grace_s,
                    )
                    agent.kill()
                    return {"key": key, "state": "unreachable"}
                if state not in states.HELD:  # lost, or no longer ours: stop at once
                    log.error("attempt %s is %s: killing its agent", key, state)
                    agent.kill()
                    return {"key": key, "state": state}
                if endpoint is None:
                    endpoint = agent.endpoint()
                    if endpoint:
                        self.attempts.update(
                            key, state=states.RUNNING, endpoint=endpoint, running_at=time.time()
                        )
                if stop_grace is not None:
                    detail = "stopped by the controller"
                    agent.stop(stop_grace)
                    break
                if agent.exit_code() is not None:
                    break
                limit = limit or self._over_limit(key, agent)
                # while the agent starts, look for its port often: the controller waits on it
                time.sleep(self.poll_s if endpoint else STARTING_POLL_S)
        except SoftTimeLimitExceeded:
            detail = "the task's time limit (the job's max_runtime and the start margin)"
            agent.stop(grace_s)
        code = agent.exit_code()
        state = states.FINISHED
        record = self.attempts.get(key)
        if record is not None and record.preempted:
            state, detail = states.PREEMPTED, f"worker {self.slot.name} was taken away"
        elif limit is not None:  # the job was killed for its memory: that is why it ended
            state, detail = states.FAILED, limit
        if detail == "the agent exited" and code:  # on its own, in error: say why
            state = states.FAILED
            detail = f"the agent exited with code {code} on worker {self.slot.name}: " + (
                agent.last_words() or f"see {agent.dir / 'agent.out'}"
            )
        self.attempts.finish(key, self.slot.name, state, detail, code)
        log.info("attempt %s: %s (exit %s)", key, detail, code)
        return {"key": key, "state": state, "exit_code": code}
