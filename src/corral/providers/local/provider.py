"""The local provider: runs corral's agent as a detached process on this machine.

GPUs are handed out under an exclusive file lock, so concurrent controllers and CLIs never give
one GPU twice. A GPU is held by an instance until that instance is terminated or every process
it started (the agent and its stage groups) is gone; an interrupted launch holds its GPUs until
it is finished (launch again with the same key) or terminated.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from corral import paths
from corral.errors import BadInput, Conflict, NotFound, NotYetTerminated, ProviderError
from corral.gpu import GpuInfo, describe, detect
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    Offer,
    Provider,
    Requirements,
    SupportsLogs,
    SupportsSimulatedPreemption,
)
from corral.providers.local import inventory, process
from corral.providers.local.agent_files import agent_endpoint, stage_groups, tail_logs
from corral.providers.local.settings import TERMINATE_GRACE, plan_error, price
from corral.providers.local.state import (
    AGENT_OUT,
    INSTANCE_FILE,
    PLAN_FILE,
    InstanceRecord,
    Layout,
    check_key,
    utcnow,
    write_atomic,
)
from corral.wire.env import ENV_AGENT_TOKEN
from corral.wire.plan import AgentPlan


class LocalProvider(Provider, SupportsLogs, SupportsSimulatedPreemption):
    """This machine. One offer (``offer_id="local"``); GPUs are shared between local runs."""

    name: ClassVar[str] = "local"
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsSpot": (
            "this machine is not a spot market; use the fake provider to simulate preemptions"
        ),
        "SupportsStop": (
            "a local run is not billed by a cloud; cancel it and launch again to resume "
            "from its checkpoints"
        ),
        "SupportsVolumes": "checkpoints already stay on this machine's disk between runs",
        "SupportsPreemptionNotice": (
            "nobody preempts this machine; `corral debug preempt` simulates a preemption"
        ),
    }

    def __init__(
        self,
        home: Path | None = None,
        gpus: list[GpuInfo] | None = None,
        price_per_hour: float | None = None,
        python: str = sys.executable,
    ):
        self.home = Path(home) if home is not None else paths.home()
        self.gpus = list(gpus) if gpus is not None else detect()
        self.price_per_hour = price(price_per_hour)
        self.python = python
        self.layout = Layout(self.home)

    # --- offers -----------------------------------------------------------------------------

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        if req.regions is not None and "local" not in req.regions:
            return []
        machine = inventory.Machine.probe(self.gpus, self.home)
        gpu_type = inventory.check_feasible(machine, req)
        if req.max_hourly_price is not None and self.price_per_hour > req.max_hourly_price:
            return []
        count = inventory.offer_count(machine, req, gpu_type)
        free = inventory.free_ids(self.gpus, gpu_type, self._held())
        available = count == 0 or len(free) >= count
        return [
            Offer(
                provider=self.name,
                offer_id="local",
                region="local",
                gpu_type=gpu_type,
                gpu_count=count,
                cpus=machine.cpus,
                memory_gb=machine.memory_gb,
                spot=False,
                price_per_hour=self.price_per_hour,
                available=available,
                availability="high" if available else "none",
                details={
                    "gpus_total": len(inventory.of_type(self.gpus, gpu_type)),
                    "gpus_free": len(free),
                    "inventory": describe(self.gpus),
                    **(
                        {}
                        if available
                        else {
                            "unavailable_reason": self._waiting_reason(count, len(free), gpu_type)
                        }
                    ),
                },
            )
        ]

    # --- launch -----------------------------------------------------------------------------

    def _waiting_reason(self, count: int, free: int, gpu_type: str | None) -> str:
        total = len(inventory.of_type(self.gpus, gpu_type))
        holders = sorted({h["run_id"] for h in self.gpu_holders() if h.get("run_id")})
        held_by = f" (held by {', '.join(holders[:3])})" if holders else ""
        return f"local: {count} GPUs needed, {free} of {total} free{held_by}"

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        check_key(key)
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the local provider")
        try:
            plan = AgentPlan.model_validate(bootstrap.plan)
        except ValidationError as exc:
            raise plan_error(exc)
        if not Path(plan.workdir).is_dir():
            raise BadInput(f"the plan's workdir {plan.workdir} is not a directory")
        with self.layout.lock():
            rec = self.layout.read(key)
            if rec is not None:
                if rec.pid is None and rec.state == "active":
                    rec = self._start(rec, plan, bootstrap)  # finish an interrupted launch
                return self._instance(rec)
            gpu_type = offer.gpu_type if offer.gpu_count > 0 else None
            ids = inventory.allocate(self.gpus, gpu_type, offer.gpu_count, self._held())
            rec = InstanceRecord(
                key=key,
                instance_id=f"local-{uuid.uuid4().hex[:12]}",
                run_id=plan.run_id,
                attempt=plan.attempt,
                gpus=ids,
                gpu_type=gpu_type,
                created_at=utcnow(),
                offer=offer.model_dump(mode="json"),
            )
            self.layout.write(rec)  # pid None: the GPUs are held from here on
            try:
                rec = self._start(rec, plan, bootstrap)
            except ProviderError:
                shutil.rmtree(self.layout.dir(key), ignore_errors=True)  # nothing runs
                raise
        return self._instance(rec)

    def _start(self, rec: InstanceRecord, plan: AgentPlan, bootstrap: Bootstrap) -> InstanceRecord:
        """Write the plan and start the agent (or adopt one already started). Lock held."""
        d = self.layout.dir(rec.key)
        agent_dir = self.layout.agent_dir(rec.key)
        agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        plan_path = d / PLAN_FILE
        found = process.find_agent(str(plan_path), rec.since)
        if found is None:
            final = plan.model_copy(update={"devices": list(rec.gpus), "state_dir": str(agent_dir)})
            write_atomic(plan_path, final.model_dump_json(indent=2), mode=0o600)
            env = {**os.environ, **bootstrap.env, ENV_AGENT_TOKEN: bootstrap.token}
            argv = [self.python, "-m", "corral.agent", "--plan", str(plan_path)]
            try:
                found = process.spawn_detached(argv, plan.workdir, env, d / AGENT_OUT)
            except OSError as exc:
                raise ProviderError(f"cannot start the agent ({self.python}): {exc.strerror}")
        pid, create_time = found
        rec = rec.model_copy(update={"pid": pid, "create_time": create_time, "pgid": pid})
        self.layout.write(rec)
        return rec

    # --- status -----------------------------------------------------------------------------

    def status(self, instance: Instance) -> InstanceStatus:
        rec = self._record(instance)
        if rec is None or rec.state == "terminated":
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
            endpoint = agent_endpoint(self.layout.agent_dir(rec.key))
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
            plan_path = self.layout.dir(rec.key) / PLAN_FILE
            found = process.find_agent(str(plan_path), fresh.since)
            if found is None:
                return fresh
            pid, ct = found
            fresh = fresh.model_copy(update={"pid": pid, "create_time": ct, "pgid": pid})
            self.layout.write(fresh)
            return fresh

    # --- terminate / preempt ----------------------------------------------------------------

    def _groups(self, rec: InstanceRecord) -> list[process.Group]:
        groups = []
        if rec.pgid is not None:
            groups.append(process.Group(rec.pgid, rec.create_time, "agent"))
        return groups + stage_groups(self.layout.agent_dir(rec.key))

    def terminate(self, instance: Instance) -> None:
        rec = self._record(instance)
        if rec is None or rec.state == "terminated":
            return
        if rec.pid is None:
            rec = self._adopt(rec)
        groups = self._groups(rec)
        left = process.stop_groups(groups, rec.since, TERMINATE_GRACE)
        # The agent may have started a stage after children.json was read: read it again
        # now that the agent is dead, and stop whatever is new.
        extra = [g for g in self._groups(rec) if g not in groups]
        left += process.stop_groups(extra, rec.since, 0.0)
        if left:
            pids = ", ".join(str(p.pid) for p in left[:5])
            raise NotYetTerminated(f"local instance {rec.key}: processes still alive ({pids})")
        with self.layout.lock():
            fresh = self.layout.read(rec.key)
            if fresh is not None and fresh.instance_id == rec.instance_id:
                self.layout.write(
                    fresh.model_copy(update={"state": "terminated", "terminated_at": utcnow()})
                )

    def preempt(self, instance: Instance, grace: float = 5.0) -> None:
        """Simulate a preemption: mark the instance preempted, SIGTERM its stage groups and
        its agent, SIGKILL after ``grace`` seconds. :meth:`status` then says PREEMPTED."""
        with self.layout.lock():
            rec = self._record(instance)
            if rec is None:
                raise NotFound(f"no local instance with key {instance.key!r}")
            if rec.state == "terminated":
                raise Conflict(f"local instance {rec.key} is terminated; nothing to preempt")
            if rec.state == "active":
                rec = rec.model_copy(update={"state": "preempted", "preempted_at": utcnow()})
                self.layout.write(rec)
        groups = self._groups(rec)
        stages = [g for g in groups if g.label != "agent"]
        agent = [g for g in groups if g.label == "agent"]
        process.stop_groups(stages + agent, rec.since, grace)

    # --- lookups ----------------------------------------------------------------------------

    def _record(self, instance: Instance) -> InstanceRecord | None:
        rec = self._read_dir(instance.key)
        if rec is None or rec.instance_id != instance.instance_id:
            return None
        return rec

    def _instance(self, rec: InstanceRecord) -> Instance:
        return Instance(
            provider=self.name,
            instance_id=rec.instance_id,
            key=rec.key,
            offer=Offer.model_validate(rec.offer),
            endpoint=agent_endpoint(self.layout.agent_dir(rec.key)),
            created_at=rec.created_at,
            data={
                "state": rec.state,
                "run_id": rec.run_id,
                "pid": rec.pid,
                "gpus": list(rec.gpus),
                "dir": str(self.layout.dir(rec.key)),
            },
        )

    def _read_dir(self, key: str) -> InstanceRecord | None:
        try:
            return self.layout.read(key)
        except BadInput:  # a key no local launch could have used
            return None

    def find(self, key: str) -> Instance | None:
        rec = self._read_dir(key)
        return None if rec is None else self._instance(rec)

    def list_instances(self) -> list[Instance]:
        """Every instance not yet terminated (preempted and failed ones included)."""
        return [self._instance(r) for r in self.layout.records() if r.state != "terminated"]

    def _holds(self, rec: InstanceRecord, snap: process.Snapshot) -> bool:
        if rec.state == "terminated" or not rec.gpus:
            return False
        if rec.pid is None:
            return True  # launching, or a launch interrupted before the agent started
        return any(process.members(g, rec.since, snap) for g in self._groups(rec))

    def _held_by(self) -> dict[str, InstanceRecord]:
        snap = process.snapshot()
        return {
            gpu: rec for rec in self.layout.records() if self._holds(rec, snap) for gpu in rec.gpus
        }

    def _held(self) -> set[str]:
        return set(self._held_by())

    def gpu_holders(self) -> list[dict[str, Any]]:
        """Each GPU of this machine, with the instance key and run id holding it (or None)."""
        held = self._held_by()
        out = []
        for g in self.gpus:
            rec = held.get(g.id)
            out.append(
                {
                    **g.to_dict(),
                    "key": rec.key if rec else None,
                    "run_id": rec.run_id if rec else None,
                    "instance_id": rec.instance_id if rec else None,
                }
            )
        return out

    def logs(self, instance: Instance, tail: int = 200) -> str:
        rec = self._record(instance)
        if rec is None:
            raise NotFound(f"no local instance with key {instance.key!r}")
        return tail_logs(self.layout.dir(rec.key), tail)

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
                    rec = self._read_dir(d.name)
                    if rec is None or rec.state != "terminated" or rec.terminated_at is None:
                        continue  # running, or not a record we understand: keep it
                    ended = rec.terminated_at.timestamp()
                else:  # a launch that never wrote its record
                    ended = d.stat().st_mtime
                if now - ended >= older_than_s:
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d.name)
        return removed
