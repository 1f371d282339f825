"""One machine of the fake cloud: a local provider of its own, with exactly the offer's GPUs.

The fake provider does not run processes itself. Each instance gets a
:class:`~corral.providers.local.LocalProvider` whose home is the instance's ``machine/``
directory and whose (fake) GPU inventory is the offer's, so the agent runs for real on this
machine, sees GPU ids ``0..n-1`` like on a fresh cloud machine, and is started, tracked and
killed by the local provider's machinery (process groups checked by create time).
"""

from __future__ import annotations

import signal
from pathlib import Path

from corral.gpu import GpuInfo
from corral.providers.base import Bootstrap, Instance, InstanceState, InstanceStatus, Offer
from corral.providers.local import LocalProvider
from corral.providers.local import process as procs


class Machine:
    def __init__(
        self, home: Path, key: str, gpu_type: str | None, gpu_count: int, python: str
    ) -> None:
        gpus = [
            GpuInfo(index=i, id=str(i), name=gpu_type or "GPU", fake=True) for i in range(gpu_count)
        ]
        self.key = key
        self.local = LocalProvider(home=home, gpus=gpus, price_per_hour=0.0, python=python)
        self._offer = Offer(
            provider=LocalProvider.name,
            offer_id="local",
            gpu_type=gpu_type if gpu_count else None,
            gpu_count=gpu_count,
        )

    def start(self, bootstrap: Bootstrap) -> Instance:
        """Start the agent (idempotent on the key). Raises what the local provider raises."""
        return self.local.launch(self._offer, bootstrap, self.key)

    def instance(self) -> Instance | None:
        return self.local.find(self.key)

    def notice(self) -> bool:
        """The preemption notice: SIGTERM to the agent only (it stops its stages gracefully,
        with the plan's grace period). True if a live agent got it."""
        rec = self.local.layout.read(self.key)
        if rec is None or rec.pgid is None:
            return False
        agent = procs.Group(rec.pgid, rec.create_time, "agent")
        return procs.signal_groups([agent], rec.since, signal.SIGTERM) > 0

    def kill(self) -> None:
        """The machine is reclaimed: every process of it gets SIGKILL now."""
        inst = self.instance()
        if inst is not None and inst.data.get("state") == "active":
            self.local.preempt(inst, grace=0.0)

    def terminate(self) -> None:
        """Stop everything and mark it terminated. May raise NotYetTerminated."""
        inst = self.instance()
        if inst is not None:
            self.local.terminate(inst)

    def status(self) -> InstanceStatus:
        inst = self.instance()
        if inst is None:
            return InstanceStatus(state=InstanceState.FAILED, detail="the agent never started")
        st = self.local.status(inst)
        if st.state == InstanceState.TERMINATED:
            return InstanceStatus(state=InstanceState.FAILED, detail="the agent is gone")
        return st

    def endpoint(self) -> str | None:
        inst = self.instance()
        return inst.endpoint if inst else None

    def agent_pid(self) -> int | None:
        inst = self.instance()
        return inst.data.get("pid") if inst else None

    def logs(self, tail: int) -> str:
        inst = self.instance()
        return self.local.logs(inst, tail) if inst else ""
