"""An agent host: instances whose agent runs as a detached process on this machine.

The local provider's machine is one; each machine of the fake cloud is another (with fake GPU
ids ``0..n-1``). The host starts the agent with the plan as the controller built it, and the
facts only it knows as launch arguments (``--devices``, ``--state-dir``, ``--checkpoint-dir``);
it tracks the agent and the stage process groups the agent lists by (pid, create time), and
stops them. State lives in files under ``root`` (:mod:`.host_state`), changed under a file lock,
so every controller and CLI on the machine sees the same instances.

GPUs are handed out under that lock: a GPU is held by an instance until it is terminated or
every process it started is gone; an interrupted launch holds its GPUs until it is finished
(launch again with the same key) or terminated. A host given :class:`DeviceLocks` (the local
machine's real GPUs) also locks each GPU machine-wide for its agent's life, so hosts rooted in
other homes on the same machine never give out the same GPU.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from corral.agent.procs import run_quietly
from corral.errors import BadInput, Conflict, NotFound, NotYetTerminated, ProviderError
from corral.files import write_atomic
from corral.providers.base import Bootstrap, InstanceState, InstanceStatus, Offer
from corral.providers.common import process
from corral.providers.common.agent_files import (
    agent_endpoint,
    stage_cleanups,
    stage_groups,
    tail_logs,
)
from corral.providers.common.device_locks import DeviceLocks
from corral.providers.common.files import check_key, read_json, utcnow
from corral.providers.common.host_state import (
    AGENT_JSON,
    AGENT_OUT,
    INSTANCE_FILE,
    PLAN_FILE,
    InstanceRecord,
    Layout,
)
from corral.providers.common.node import NodeView
from corral.wire.env import ENV_AGENT_TOKEN

#: Seconds ``terminate`` gives processes between SIGTERM and SIGKILL.
TERMINATE_GRACE = 2.0

#: ``choose(held)`` -> the GPU ids a new instance gets, given the ids other instances hold
GpuChooser = Callable[[set[str]], list[str]]


class AgentHost:
    """Agents of launched instances, run as detached processes of this machine."""

    def __init__(
        self,
        root: Path,
        python: str = sys.executable,
        label: str = "local",
        device_locks: DeviceLocks | None = None,
        node: NodeView | None = None,
    ) -> None:
        self.layout = Layout(root)
        #: the node the agent runs as (its environment, before the bootstrap's, and its view
        #: of the files); None: this process's (the local machine: same files, same user)
        self.node = node
        self.python = python
        #: how messages name this host's instances ("local instance <key>")
        self.label = label
        #: machine-wide GPU locks; None where GPU ids are this host's own (a fake machine)
        self.device_locks = device_locks

    # --- launch -----------------------------------------------------------------------------

    def launch(
        self,
        key: str,
        bootstrap: Bootstrap,
        *,
        offer: Offer,
        choose_gpus: GpuChooser,
        gpu_type: str | None = None,
        launch_args: list[str] | None = None,
    ) -> InstanceRecord:
        """Start the agent of ``bootstrap`` for ``key`` (idempotent on ``key``: an existing
        record is returned, an interrupted launch finished). ``choose_gpus`` runs under the
        lock. ``launch_args``: more ``corral agent`` launch options this machine knows
        (``--checkpoint-dir`` of its own disk, say); ``--devices`` and ``--state-dir`` are
        always given."""
        check_key(key)
        plan = bootstrap.plan
        if plan.code is None and not Path(plan.workdir).is_dir():
            raise BadInput(f"the plan's workdir {plan.workdir} is not a directory")
        with self.layout.lock():
            rec = self.layout.read(key)
            if rec is not None:
                if rec.pid is None and rec.state == "active":
                    rec = self._start(rec, bootstrap, resume=True)  # an interrupted launch
                return rec
            rec = InstanceRecord(
                key=key,
                instance_id=f"local-{uuid.uuid4().hex[:12]}",
                run_id=plan.run_id,
                attempt=plan.attempt,
                gpus=choose_gpus(self.held() | self.busy_elsewhere()),
                gpu_type=gpu_type,
                created_at=utcnow(),
                offer=offer.model_dump(mode="json"),
                launch_args=list(launch_args or []),
            )
            self.layout.write(rec)  # pid None: the GPUs are held from here on
            try:
                return self._start(rec, bootstrap)
            except ProviderError:  # NoCapacity from a machine-wide lock included
                shutil.rmtree(self.layout.dir(key), ignore_errors=True)  # nothing runs
                raise

    def _start(
        self, rec: InstanceRecord, bootstrap: Bootstrap, *, resume: bool = False
    ) -> InstanceRecord:
        """Write the plan and start the agent (or, ``resume``-ing an interrupted launch, adopt
        the one it started). Lock held."""
        d = self.layout.dir(rec.key)
        agent_dir = self.layout.agent_dir(rec.key)
        agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        plan_path = d / PLAN_FILE
        found = self._started(rec) if resume else None
        if found is None:
            write_atomic(plan_path, bootstrap.plan.model_dump_json(indent=2), mode=0o600)
            base = dict(os.environ) if self.node is None else self.node.env()
            auth = bootstrap.image.agent_env() if bootstrap.image else {}
            env = {**base, **bootstrap.env, **auth, ENV_AGENT_TOKEN: bootstrap.token}
            # shipped code is not there yet: the agent starts in its instance's directory
            cwd = bootstrap.plan.workdir if bootstrap.plan.code is None else str(d)
            argv = [self.python, "-m", "corral.agent", "--devices", ",".join(rec.gpus)]
            argv += ["--state-dir", str(agent_dir), *rec.launch_args]
            argv += ["--plan", str(plan_path)]  # last: how find_agent recognises it
            if self.node is not None:
                argv = self.node.argv(argv)
            with self._locked(rec.gpus) as fds:  # the agent inherits the locks
                try:
                    found = process.spawn_detached(argv, cwd, env, d / AGENT_OUT, pass_fds=fds)
                except OSError as exc:
                    raise ProviderError(
                        f"cannot start the agent ({self.python}): {exc.strerror}"
                    ) from None
        pid, create_time = found
        rec = rec.model_copy(update={"pid": pid, "create_time": create_time, "pgid": pid})
        self.layout.write(rec)
        return rec

    # --- status -----------------------------------------------------------------------------

    def record(self, key: str) -> InstanceRecord | None:
        """The record of ``key``; None if there is none (or no launch could use that key)."""
        try:
            return self.layout.read(key)
        except BadInput:
            return None

    def records(self) -> list[InstanceRecord]:
        return self.layout.records()

    def endpoint(self, rec: InstanceRecord) -> str | None:
        return agent_endpoint(self.layout.agent_dir(rec.key))

    def status(self, rec: InstanceRecord) -> InstanceStatus:
        """The instance's state, from its record and its processes."""
        if rec.state == "terminated":
            return InstanceStatus(state=InstanceState.TERMINATED)
        if rec.state == "preempted":
            return InstanceStatus(state=InstanceState.PREEMPTED, detail="preempted (simulated)")
        if rec.pid is None:
            rec = self._adopt(rec)
            if rec.pid is None:
                return InstanceStatus(
                    state=InstanceState.FAILED,
                    detail="the launch was interrupted before the agent started; "
                    "launch again with the same key to finish it",
                )
        if process.alive(rec.pid, rec.create_time):
            endpoint = self.endpoint(rec)
            if endpoint:
                return InstanceStatus(state=InstanceState.RUNNING, endpoint=endpoint)
            return InstanceStatus(state=InstanceState.PROVISIONING, detail="agent starting")
        out = self.layout.dir(rec.key) / AGENT_OUT
        return InstanceStatus(
            state=InstanceState.FAILED, detail=f"agent process exited (see {out})"
        )

    def _adopt(self, rec: InstanceRecord) -> InstanceRecord:
        """Re-read a launching record under the lock; adopt its agent if it was started."""
        with self.layout.lock():
            fresh = self.layout.read(rec.key)
            if fresh is None or fresh.pid is not None or fresh.state != "active":
                return fresh or rec
            found = self._started(fresh)
            if found is None:
                return fresh
            pid, ct = found
            fresh = fresh.model_copy(update={"pid": pid, "create_time": ct, "pgid": pid})
            self.layout.write(fresh)
            return fresh

    def _started(self, rec: InstanceRecord) -> tuple[int, float] | None:
        """(pid, create_time) of the agent an interrupted launch of ``rec`` started, if it
        runs: the pid it wrote in ``agent.json`` (looked at alone), else looked for among the
        machine's processes (a launch interrupted within the agent's first moments)."""
        plan_path = str(self.layout.dir(rec.key) / PLAN_FILE)
        written = read_json(self.layout.agent_dir(rec.key) / AGENT_JSON)
        pid = written.get("pid") if isinstance(written, dict) else None
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            ct = process.is_agent(pid, plan_path, rec.since)
            if ct is not None:
                return pid, ct
        return process.find_agent(plan_path, rec.since)

    # --- terminate / preempt ----------------------------------------------------------------

    def _groups(self, rec: InstanceRecord) -> list[process.Group]:
        groups = []
        if rec.pgid is not None:
            groups.append(process.Group(rec.pgid, rec.create_time, "agent"))
        stages = stage_groups(self.layout.agent_dir(rec.key))
        return groups + stages + process.rank_groups(stages)

    def terminate(self, rec: InstanceRecord) -> None:
        """Stop every process of the instance and mark it terminated (idempotent).
        :class:`NotYetTerminated` if some process outlived SIGKILL."""
        if rec.state == "terminated":
            return
        if rec.pid is None:
            rec = self._adopt(rec)
        groups = self._groups(rec)
        left = process.stop_groups(groups, rec.since, TERMINATE_GRACE)
        # The agent may have started a stage after children.json was read: read it again
        # now that the agent is dead, and stop whatever is new.
        extra = [g for g in self._groups(rec) if g not in groups]
        left += process.stop_groups(extra, rec.since, 0.0)
        for argv in stage_cleanups(self.layout.agent_dir(rec.key)):  # a stage's container
            run_quietly(argv)  # a stage container's removal, say
        if left:
            groups_left = ", ".join(f"{g.label or 'group'} {g.pgid}" for g in left[:5])
            raise NotYetTerminated(
                f"{self.label} instance {rec.key}: processes still alive ({groups_left})"
            )
        with self.layout.lock():
            fresh = self.layout.read(rec.key)
            if fresh is not None and fresh.instance_id == rec.instance_id:
                self.layout.write(
                    fresh.model_copy(update={"state": "terminated", "terminated_at": utcnow()})
                )

    def preempt(self, key: str, instance_id: str, grace: float = 5.0) -> None:
        """Simulate a preemption: mark the instance preempted, SIGTERM its stage groups and
        its agent, SIGKILL after ``grace`` seconds. :meth:`status` then says PREEMPTED."""
        with self.layout.lock():
            rec = self.record(key)
            if rec is None or rec.instance_id != instance_id:
                raise NotFound(f"no {self.label} instance with key {key!r}")
            if rec.state == "terminated":
                raise Conflict(f"{self.label} instance {rec.key} is terminated; nothing to preempt")
            if rec.state == "active":
                rec = rec.model_copy(update={"state": "preempted", "preempted_at": utcnow()})
                self.layout.write(rec)
        groups = self._groups(rec)
        stages = [g for g in groups if g.label != "agent"]
        agent = [g for g in groups if g.label == "agent"]
        process.stop_groups(stages + agent, rec.since, grace)

    def signal_agent(self, rec: InstanceRecord, sig: int = signal.SIGTERM) -> bool:
        """Send ``sig`` to the agent alone (a preemption notice). True if a live agent got it."""
        if rec.pgid is None:
            return False
        agent = process.Group(rec.pgid, rec.create_time, "agent")
        return process.signal_groups([agent], rec.since, sig) > 0

    # --- GPUs, logs, cleanup ----------------------------------------------------------------

    def _holds(self, rec: InstanceRecord) -> bool:
        if rec.state == "terminated" or not rec.gpus:
            return False
        if rec.pid is None:
            return True  # launching, or a launch interrupted before the agent started
        return any(process.group_left(g, rec.since) for g in self._groups(rec))

    def held_by(self) -> dict[str, InstanceRecord]:
        """GPU id -> the record of the instance holding it (each instance's own process
        groups asked; the machine's processes are not scanned)."""
        return {gpu: rec for rec in self.records() if self._holds(rec) for gpu in rec.gpus}

    def held(self) -> set[str]:
        return set(self.held_by())

    def busy_elsewhere(self) -> set[str]:
        """GPU ids whose machine-wide lock is held (by an agent of any home on this machine;
        this host's own agents included). Empty without device locks."""
        return set() if self.device_locks is None else self.device_locks.busy()

    def _locked(self, gpus: list[str]) -> contextlib.AbstractContextManager[list[int]]:
        if self.device_locks is None or not gpus:
            return contextlib.nullcontext([])
        return self.device_locks.hold(gpus)

    def logs(self, rec: InstanceRecord, tail: int = 200) -> str:
        return tail_logs(self.layout.dir(rec.key), tail)

    def instance_dir(self, key: str) -> Path:
        return self.layout.dir(key)

    def cleanup(self, older_than_s: float, now: float | None = None) -> list[str]:
        """Delete the directories of instances terminated more than ``older_than_s`` seconds
        ago (and of launches that never wrote a record). Returns the keys removed."""
        now = time.time() if now is None else now
        removed = []
        with self.layout.lock():
            if not self.layout.instances.is_dir():
                return []
            for d in sorted(self.layout.instances.iterdir()):
                if not d.is_dir():
                    continue
                if (d / INSTANCE_FILE).exists():
                    rec = self.record(d.name)
                    if rec is None or rec.state != "terminated" or rec.terminated_at is None:
                        continue  # running, or not a record we understand: keep it
                    ended = rec.terminated_at.timestamp()
                else:  # a launch that never wrote its record
                    ended = d.stat().st_mtime
                if now - ended >= older_than_s:
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d.name)
        return removed
