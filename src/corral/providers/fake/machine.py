"""One machine of the fake cloud: an agent host of its own, with exactly the offer's GPUs.

The fake provider does not run processes itself. Each instance gets an
:class:`~corral.providers.common.host.AgentHost` rooted in the instance's ``machine/``
directory whose (fake) GPUs are the offer's, so the agent runs for real on this machine, sees
GPU ids ``0..n-1`` like on a fresh cloud machine, and is started, tracked and killed by the
shared host machinery (process groups checked by create time). A machine with an ephemeral
disk gives its agent ``machine/disk/checkpoints`` as its checkpoint directory; otherwise the
run's checkpoints are on the cloud's volume of the run (``fake/volumes/<run id>/``), which every
machine of the run mounts.

A machine shares nothing with the controller (:mod:`corral.providers.common.node`): its agent
runs with ``--root machine/fs`` and an environment of its own, so the job's code arrives the way
it would on a cloud machine (shipped by the controller, or from object storage). Where this
machine allows it, the agent runs in a mount namespace of its own that shows ``machine/`` at
``/mnt``: every machine then sees its root at ``/mnt/fs`` and its disk at ``/mnt/disk``, the
same absolute paths, like machines of a real cloud, and nothing of the other machines
(``fake/instances/`` is empty there but for its own). A machine that is reclaimed or terminated
loses its disk (``fs/`` and ``disk/`` are deleted once its processes are gone); the run's
volume and the agent's files its host reads (``instances/``) stay.
"""

from __future__ import annotations

import os
from pathlib import Path

from corral.providers.base import Bootstrap, InstanceState, InstanceStatus, Offer
from corral.providers.common.host import AgentHost
from corral.providers.common.host_state import InstanceRecord
from corral.providers.common.node import NodeView
from corral.wire.container import ENV_CONTAINER_ENGINE, ENV_CONTAINER_GPUS

#: what a fake machine's agent gets of this machine's container engine (the choice and its
#: configuration), for a job with ``image:``: the machine "has" this machine's engine
ENGINE_ENV = (
    ENV_CONTAINER_ENGINE,
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
)


class Machine:
    def __init__(
        self,
        home: Path,
        key: str,
        gpu_type: str | None,
        gpu_count: int,
        python: str,
        *,
        ephemeral_disk: bool = False,
        volume: Path | None = None,
        cloud: Path | None = None,
        keep_gone: bool = False,
    ) -> None:
        self.key = key
        self.home = home
        #: the machine's processes and their view of ``home`` (``fs/``: its own "/"); of
        #: ``cloud`` (the directory of every machine) they see nothing but ``home``
        self.node = NodeView(home, hide=cloud)
        self.host = AgentHost(home, python, label="fake machine", node=self.node)
        #: the run's network volume in this cloud (checkpoints outlive a machine), unless
        #: the disk is ephemeral
        self.volume = volume
        self.gpu_type = gpu_type if gpu_count else None
        self.gpus = [str(i) for i in range(gpu_count)]
        self.ephemeral_disk = ephemeral_disk
        #: a gone machine's disk is kept aside for inspection (``FakeCloud.keep_gone_disks``)
        self.keep_gone = keep_gone

    @property
    def disk(self) -> Path:
        """The machine's own disk (with ``ephemeral_disk``: checkpoints go there)."""
        return self.home / "disk"

    def start(self, bootstrap: Bootstrap, offer: Offer) -> InstanceRecord:
        """Start the agent (idempotent on the key). Raises what the host raises. A plan with
        an image: the agent gets this machine's container engine and its configuration."""
        if bootstrap.plan.container is not None:
            engine = {k: os.environ[k] for k in ENGINE_ENV if os.environ.get(k)}
            engine[ENV_CONTAINER_GPUS] = "none"  # its GPU ids are simulated: no device
            bootstrap = bootstrap.model_copy(update={"env": {**engine, **bootstrap.env}})
        return self.host.launch(
            self.key,
            bootstrap,
            offer=offer,
            choose_gpus=lambda _held: list(self.gpus),
            gpu_type=self.gpu_type,
            launch_args=["--root", self.node.root, *self._checkpoints()],
        )

    def _checkpoints(self) -> list[str]:
        if self.ephemeral_disk:
            return ["--checkpoint-dir", self.node.path(self.disk / "checkpoints")]
        if self.volume is not None:
            return ["--checkpoint-dir", str(self.volume / "checkpoints")]
        return []

    def record(self) -> InstanceRecord | None:
        return self.host.record(self.key)

    def notice(self) -> bool:
        """The preemption notice: SIGTERM to the agent only (it stops its stages gracefully,
        with the plan's grace period). True if a live agent got it."""
        rec = self.record()
        return rec is not None and self.host.signal_agent(rec)

    def kill(self) -> None:
        """The machine is reclaimed: every process of it gets SIGKILL now."""
        rec = self.record()
        if rec is not None and rec.state == "active":
            self.host.preempt(rec.key, rec.instance_id, grace=0.0)
        self.node.erase(self.disk, keep=self.keep_gone)

    def terminate(self) -> None:
        """Stop everything and mark it terminated. May raise NotYetTerminated."""
        rec = self.record()
        if rec is not None:
            self.host.terminate(rec)
        self.node.erase(self.disk, keep=self.keep_gone)

    def status(self) -> InstanceStatus:
        rec = self.record()
        if rec is None:
            return InstanceStatus(state=InstanceState.FAILED, detail="the agent never started")
        st = self.host.status(rec)
        if st.state == InstanceState.TERMINATED:
            return InstanceStatus(state=InstanceState.FAILED, detail="the agent is gone")
        return st

    def endpoint(self) -> str | None:
        rec = self.record()
        return self.host.endpoint(rec) if rec else None

    def agent_pid(self) -> int | None:
        rec = self.record()
        return rec.pid if rec else None

    def logs(self, tail: int) -> str:
        rec = self.record()
        return self.host.logs(rec, tail) if rec else ""
