"""The local provider: runs corral's agent as a detached process on this machine.

The agents run on an :class:`~corral.providers.common.host.AgentHost` rooted at
``CORRAL_HOME/local``. GPUs are handed out under its exclusive file lock, so concurrent
controllers and CLIs never give one GPU twice; each GPU given is also locked machine-wide
(:mod:`~corral.providers.common.device_locks`, in ``CORRAL_GPU_LOCK_DIR``) for its agent's life,
so runs of other homes and users on this machine never get it either. A GPU is held by an
instance until that instance is terminated or every process it started (the agent and its
stage groups) is gone; an interrupted launch holds its GPUs until it is finished (launch again
with the same key) or terminated.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from corral import paths
from corral.errors import BadInput, InfeasibleRequest, NotFound
from corral.gpu import GpuInfo, describe, detect
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    NodeProfile,
    Offer,
    Provider,
    Requirements,
    RunsOnThisMachine,
    SupportsLogs,
    SupportsSimulatedPreemption,
)
from corral.providers.common.device_locks import DeviceLocks
from corral.providers.common.host import AgentHost
from corral.providers.common.host_state import InstanceRecord
from corral.providers.local import inventory
from corral.providers.local.settings import gpu_lock_dir, price
from corral.wire.container import find_engine, no_engine_reason


class LocalProvider(Provider, SupportsLogs, SupportsSimulatedPreemption, RunsOnThisMachine):
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
        "SupportsGangs": ("this machine is one node; the fake provider simulates several machines"),
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
        # a declared (fake) inventory locks in its own namespace: it names no real device
        namespace = "fake" if any(g.fake for g in self.gpus) else "gpu"
        locks = DeviceLocks(gpu_lock_dir(), namespace)
        self.host = AgentHost(self.home / "local", python, label="local", device_locks=locks)

    # --- offers -----------------------------------------------------------------------------

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        if req.regions is not None and "local" not in req.regions:
            return []
        if req.image and find_engine() is None:  # never a silent run on the host
            raise InfeasibleRequest(no_engine_reason(req.image))
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

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        """This machine as it is; a job with ``image:`` runs in it through the machine's
        container engine (see corral.wire.container)."""
        return NodeProfile(container_engine="auto")

    # --- launch -----------------------------------------------------------------------------

    def _waiting_reason(self, count: int, free: int, gpu_type: str | None) -> str:
        total = len(inventory.of_type(self.gpus, gpu_type))
        holders = sorted({h["run_id"] for h in self.gpu_holders() if h.get("run_id")})
        held_by = f" (held by {', '.join(holders[:3])})" if holders else ""
        return f"local: {count} GPUs needed, {free} of {total} free{held_by}"

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the local provider")
        gpu_type = offer.gpu_type if offer.gpu_count > 0 else None

        def choose(held: set[str]) -> list[str]:
            return inventory.allocate(self.gpus, gpu_type, offer.gpu_count, held)

        rec = self.host.launch(key, bootstrap, offer=offer, choose_gpus=choose, gpu_type=gpu_type)
        return self._instance(rec)

    # --- status / terminate / preempt -------------------------------------------------------

    def status(self, instance: Instance) -> InstanceStatus:
        rec = self._record(instance)
        if rec is None:
            return InstanceStatus(state=InstanceState.TERMINATED)
        return self.host.status(rec)

    def terminate(self, instance: Instance) -> None:
        rec = self._record(instance)
        if rec is not None:
            self.host.terminate(rec)

    def preempt(self, instance: Instance, grace: float = 5.0) -> None:
        """Simulate a preemption: mark the instance preempted, SIGTERM its stage groups and
        its agent, SIGKILL after ``grace`` seconds. :meth:`status` then says PREEMPTED."""
        self.host.preempt(instance.key, instance.instance_id, grace)

    # --- lookups ----------------------------------------------------------------------------

    def _record(self, instance: Instance) -> InstanceRecord | None:
        rec = self.host.record(instance.key)
        if rec is None or rec.instance_id != instance.instance_id:
            return None
        return rec

    def _instance(self, rec: InstanceRecord) -> Instance:
        return Instance(
            provider=self.name,
            instance_id=rec.instance_id,
            key=rec.key,
            offer=Offer.model_validate(rec.offer),
            endpoint=self.host.endpoint(rec),
            created_at=rec.created_at,
            data={
                "state": rec.state,
                "run_id": rec.run_id,
                "pid": rec.pid,
                "gpus": list(rec.gpus),
                "dir": str(self.host.instance_dir(rec.key)),
            },
        )

    def find(self, key: str) -> Instance | None:
        rec = self.host.record(key)
        return None if rec is None else self._instance(rec)

    def list_instances(self) -> list[Instance]:
        """Every instance not yet terminated (preempted and failed ones included)."""
        return [self._instance(r) for r in self.host.records() if r.state != "terminated"]

    def _held(self) -> set[str]:
        """GPU ids held by this home's instances or locked by any run on this machine."""
        return self.host.held() | self.host.busy_elsewhere()

    def gpu_holders(self) -> list[dict[str, Any]]:
        """Each GPU of this machine, with the instance key and run id holding it (or None),
        and whether a run of another corral home on this machine holds it."""
        held = self.host.held_by()
        locked = self.host.busy_elsewhere()
        out = []
        for g in self.gpus:
            rec = held.get(g.id)
            out.append(
                {
                    **g.to_dict(),
                    "key": rec.key if rec else None,
                    "run_id": rec.run_id if rec else None,
                    "instance_id": rec.instance_id if rec else None,
                    "other_home": rec is None and g.id in locked,
                }
            )
        return out

    def logs(self, instance: Instance, tail: int = 200) -> str:
        rec = self._record(instance)
        if rec is None:
            raise NotFound(f"no local instance with key {instance.key!r}")
        return self.host.logs(rec, tail)

    def cleanup(self, older_than_s: float, now: float | None = None) -> list[str]:
        """Delete the directories of instances terminated more than ``older_than_s`` seconds
        ago (and of launches that never wrote a record). Returns the keys removed."""
        return self.host.cleanup(older_than_s, time.time() if now is None else now)
