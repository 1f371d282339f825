"""The fake provider: a spot cloud simulated on this machine, for tests, demos and benchmarks.

It sells the offers of a catalog (:mod:`corral.providers.fake.cloud`) with prices and a
capacity per machine kind; an instance is PROVISIONING for ``launch_delay_s`` and then runs
corral's agent for real (:class:`~corral.providers.fake.machine.Machine`); spot instances are
preempted on a schedule or at a seeded random rate: the agent gets SIGTERM (the notice) and
every process of the machine SIGKILL ``notice_s`` later. ``status`` says PREEMPTED from the
notice on, so the controller recovers the run as soon as the agent has stopped.

Time comes from the injected ``clock`` and the simulation moves when the provider is called
(``offers``, ``launch``, ``status``, ``terminate``, ``list_instances``): no thread, and a test
decides when things happen by setting its clock. On the wall clock (the default) a small timer
process per instance (:mod:`corral.providers.fake.timer`) also calls it when an event is due,
because the controller does not ask for ``status`` while the agent answers, and a cloud does
not wait to be asked before it reclaims a machine. All state is in files under
``CORRAL_HOME/fake/`` (:mod:`corral.providers.fake.state`), changed under a file lock, so a
new provider object - a restarted controller - sees the same instances.

``image:`` is honoured or refused, as on the local provider: a fake machine is a VM with this
machine's container engine (podman or docker on PATH, or ``CORRAL_CONTAINER_ENGINE``), through
which its agent runs the job's setup and stages in the image; without one the offers raise
:class:`~corral.errors.InfeasibleRequest` saying so, and nothing runs on the machine instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from corral import paths
from corral.errors import (
    BadInput,
    Conflict,
    CorralError,
    InfeasibleRequest,
    NoCapacity,
    NotFound,
    NotYetTerminated,
    ProviderError,
)
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    NodeProfile,
    Offer,
    Provider,
    Requirements,
    SupportsGangs,
    SupportsLogs,
    SupportsPreemptionNotice,
    SupportsSimulatedPreemption,
    SupportsSpot,
)
from corral.providers.common import process as procs
from corral.providers.common.files import check_key
from corral.providers.fake import market
from corral.providers.fake.cloud import FakeCloud, load_cloud
from corral.providers.fake.machine import Machine
from corral.providers.fake.state import TIMER_OUT, FakeRecord, Layout, next_event
from corral.wire.container import find_engine, no_engine_reason

_GONE = ("preempted", "failed", "terminated")
#: where a fake machine keeps the runs' code and state (under its own root)
NODE_RUNS = "/corral/runs"

log = logging.getLogger("corral.providers.fake")


class FakeProvider(
    Provider,
    SupportsSpot,
    SupportsPreemptionNotice,
    SupportsSimulatedPreemption,
    SupportsLogs,
    SupportsGangs,
):
    """A simulated spot cloud. ``cloud``: a :class:`FakeCloud`, a dict or a JSON/YAML path;
    default: the file named by ``CORRAL_FAKE_CLOUD``, else the built-in catalog."""

    #: the notice is delivered as SIGTERM to the agent: no node hook needed
    name: ClassVar[str] = "fake"
    max_nodes: ClassVar[int] = 16
    gang_form: ClassVar[str] = "simulated machines, each its own machine root, on loopback"
    launches_gangs: ClassVar[bool] = True
    keeps_members: ClassVar[bool] = True
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsStop": "the fake cloud sells spot and on-demand machines only; none can be "
        "stopped and started again",
        "SupportsVolumes": "the run's checkpoints are on one volume of the fake cloud that "
        "each of its machines mounts; set ephemeral_disk in the fake cloud file to give each "
        "machine an empty checkpoint directory instead",
    }

    def __init__(
        self,
        cloud: FakeCloud | dict[str, Any] | str | Path | None = None,
        *,
        home: Path | None = None,
        clock: Callable[[], float] = time.time,
        python: str = sys.executable,
        timers: bool | None = None,
    ):
        self.cloud = load_cloud(cloud)
        self.home = Path(home) if home is not None else paths.home()
        self.clock = clock
        self.python = python
        #: start a timer process per instance (:mod:`corral.providers.fake.timer`) so boots,
        #: notices and kills happen on time without provider calls; default: on the wall clock
        self.timers = clock is time.time if timers is None else timers
        self.layout = Layout(self.home)

    # --- offers -----------------------------------------------------------------------------

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        if req.image and find_engine() is None:  # the machines have this machine's engine
            raise InfeasibleRequest(f"fake: {no_engine_reason(req.image)}")
        now = self.clock()
        with self.layout.lock():
            records = [self._advance(r, now) for r in self.layout.records()]
        in_use = Counter(r.entry for r in records if r.holds_capacity)
        return market.offers(self.cloud, req, in_use, self.name)

    # --- launch -----------------------------------------------------------------------------

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        check_key(key)
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the fake provider")
        parsed = market.parse_offer_id(offer.offer_id)
        entry = self.cloud.entry(parsed[0]) if parsed else None
        if entry is None or parsed is None:
            raise BadInput(f"offer {offer.offer_id!r} is not in the fake cloud's catalog")
        plan = bootstrap.plan
        self._check_workdir(bootstrap)
        now = self.clock()
        with self.layout.lock():
            rec = self.layout.read(key)
            if rec is not None:  # idempotent: the instance launched with this key
                rec = self._advance(rec, now, bootstrap)
                if rec.state == "provisioning":
                    self.layout.save_bootstrap(key, bootstrap)
                return self._instance(rec)
            in_use = sum(
                1 for r in self.layout.records() if r.holds_capacity and r.entry == entry.id
            )
            if in_use >= entry.capacity:
                raise NoCapacity(
                    f"fake/{entry.region}: all {entry.capacity} {entry.id} machines are in use",
                    fields={"offer_id": offer.offer_id, "capacity": entry.capacity},
                )
            index = self.layout.next_launch_index()
            spot = parsed[1]
            preempt_at, cause = market.preemption_at(
                self.cloud, key=key, index=index, launched_at=now, spot=spot
            )
            rec = FakeRecord(
                key=key,
                instance_id=f"fake-{uuid.uuid4().hex[:12]}",
                launch_index=index,
                entry=entry.id,
                offer=offer.model_dump(mode="json"),
                spot=spot,
                run_id=plan.run_id,
                gpu_type=entry.gpu_type,
                gpu_count=entry.gpu_count,
                launched_at=now,
                ready_at=now + self.cloud.launch_delay_s,
                preempt_at=preempt_at,
                preempt_cause=cause,
                notice_s=self.cloud.notice_s,
                ephemeral_disk=self.cloud.ephemeral_disk,
                keep_gone=self.cloud.keep_gone_disks,
            )
            self.layout.write(rec)
            if now < rec.ready_at:
                self.layout.save_bootstrap(key, bootstrap)
            rec = self._advance(rec, now, bootstrap)
            if rec.state == "failed" and not rec.booted:  # nothing runs: forget it
                shutil.rmtree(self.layout.dir(key), ignore_errors=True)
                raise ProviderError(rec.detail)
            self._start_timer(rec, now)
        return self._instance(rec)

    @staticmethod
    def _check_workdir(bootstrap: Bootstrap) -> None:
        workdir = bootstrap.plan.workdir
        if bootstrap.plan.code is None and not Path(workdir).is_dir():
            raise BadInput(f"the plan's workdir {workdir} is not a directory")

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        """A fake machine shares no file with the controller: the code is shipped to
        ``/corral/runs/<run id>/work`` under the machine's own root. Its container engine is
        this machine's (``image:``: the job's commands run in the image through it, see
        :mod:`corral.providers.fake.machine`)."""
        return NodeProfile(workdir=f"{NODE_RUNS}/{run_id}/work", container_engine="auto")

    # --- the simulation (every method below runs with the lock held) ------------------------

    def _machine(self, rec: FakeRecord) -> Machine:
        home = self.layout.machine_home(rec.key)
        return Machine(
            home,
            rec.key,
            rec.gpu_type,
            rec.gpu_count,
            self.python,
            ephemeral_disk=rec.ephemeral_disk,
            volume=self.layout.root / "volumes" / rec.run_id,
            cloud=self.layout.instances,
            keep_gone=rec.keep_gone or self.cloud.keep_gone_disks,
        )

    def _advance(
        self, rec: FakeRecord, now: float, bootstrap: Bootstrap | None = None
    ) -> FakeRecord:
        """Apply what happened up to ``now``: boot, preemption notice, kill. Saves changes."""
        if rec.state in _GONE:
            return rec
        before = rec
        if rec.state == "provisioning" and now >= rec.ready_at:
            doomed = rec.preempt_at is not None and (
                rec.preempt_at <= rec.ready_at or now >= rec.preempt_at + rec.notice_s
            )
            if not doomed:  # never boot a machine only to kill it in the same breath
                rec = self._boot(rec, now, bootstrap)
        due = rec.preempt_at is not None and now >= rec.preempt_at
        if rec.state in ("provisioning", "running") and due and rec.preempt_at is not None:
            rec = self._notice(rec, rec.preempt_at, rec.preempt_at + rec.notice_s)
        if rec.state == "preempting" and rec.kill_at is not None and now >= rec.kill_at:
            if rec.booted:
                self._machine(rec).kill()
            rec = rec.model_copy(update={"state": "preempted", "ended_at": rec.kill_at})
        if rec != before:
            self.layout.write(rec)
        return rec

    def _boot(self, rec: FakeRecord, now: float, bootstrap: Bootstrap | None) -> FakeRecord:
        bs = bootstrap or self.layout.load_bootstrap(rec.key)
        if bs is None:
            return rec  # interrupted launch: status says so; a launch with this key boots it
        try:
            self._check_workdir(bs)
            self._machine(rec).start(bs, Offer.model_validate(rec.offer))
        except CorralError as exc:
            self.layout.drop_bootstrap(rec.key)
            detail = f"the machine could not start the agent: {exc.message}"
            return rec.model_copy(update={"state": "failed", "detail": detail, "ended_at": now})
        self.layout.drop_bootstrap(rec.key)
        return rec.model_copy(update={"state": "running", "booted": True})

    def _notice(self, rec: FakeRecord, at: float, kill_at: float) -> FakeRecord:
        if rec.booted:
            self._machine(rec).notice()
        self.layout.drop_bootstrap(rec.key)
        cause = rec.preempt_cause or "manual"
        detail = (
            f"preempted ({cause}): notice at +{at - rec.launched_at:.1f}s, "
            f"machine reclaimed at +{kill_at - rec.launched_at:.1f}s"
        )
        update = {"state": "preempting", "noticed_at": at, "kill_at": kill_at, "detail": detail}
        return rec.model_copy(update=update)

    def _start_timer(self, rec: FakeRecord, now: float) -> None:
        """On the wall clock, a process that applies ``rec``'s scheduled events on time."""
        if not self.timers or next_event(rec, now) is None:
            return
        argv = [self.python, "-m", "corral.providers.fake.timer", "--home", str(self.home)]
        argv += ["--key", rec.key, "--instance-id", rec.instance_id, "--python", self.python]
        out = self.layout.dir(rec.key) / TIMER_OUT
        try:
            procs.spawn_detached(argv, str(self.home), dict(os.environ), out)
        except OSError as exc:  # the provider still works, only lazily
            log.warning("fake: cannot start the timer of %s: %s", rec.key, exc.strerror)

    def _fresh(self, instance: Instance, now: float) -> FakeRecord | None:
        """The instance's record, advanced to ``now``; None if this cloud never launched it."""
        try:
            rec = self.layout.read(instance.key)
        except BadInput:
            return None
        if rec is None or rec.instance_id != instance.instance_id:
            return None
        return self._advance(rec, now)

    # --- status / terminate / preempt -------------------------------------------------------

    def status(self, instance: Instance) -> InstanceStatus:
        now = self.clock()
        with self.layout.lock():
            rec = self._fresh(instance, now)
            if rec is None or rec.state == "terminated":
                return InstanceStatus(state=InstanceState.TERMINATED)
            if rec.state in ("preempting", "preempted"):
                return InstanceStatus(state=InstanceState.PREEMPTED, detail=rec.detail)
            if rec.state == "failed":
                return InstanceStatus(state=InstanceState.FAILED, detail=rec.detail)
            if rec.state == "provisioning":
                if now >= rec.ready_at and self.layout.load_bootstrap(rec.key) is None:
                    return InstanceStatus(
                        state=InstanceState.FAILED,
                        detail="the launch was interrupted before the machine booted; "
                        "launch again with the same key to boot it",
                    )
                left = max(0.0, rec.ready_at - now)
                return InstanceStatus(
                    state=InstanceState.PROVISIONING, detail=f"booting ({left:.1f}s left)"
                )
            return self._machine(rec).status()

    def terminate(self, instance: Instance) -> None:
        """Kill the machine's processes and mark it terminated; with the cloud's
        ``terminate_delay_s``, :class:`NotYetTerminated` until that long after the first
        request (the machine is gone only then, and its capacity free)."""
        now = self.clock()
        with self.layout.lock():
            rec = self._fresh(instance, now)
            if rec is None or rec.state == "terminated":
                return
            if rec.terminate_requested_at is None and self.cloud.terminate_delay_s > 0:
                rec = rec.model_copy(update={"terminate_requested_at": now})
                self.layout.write(rec)
            if not rec.booted:
                self._confirm_terminated(rec, now)
                return
        self._machine(rec).terminate()  # outside the lock: may wait for processes to go
        with self.layout.lock():
            fresh = self._fresh(instance, now)
            if fresh is not None and fresh.state != "terminated":
                self._confirm_terminated(fresh, now)

    def _confirm_terminated(self, rec: FakeRecord, now: float) -> None:
        """Mark ``rec`` terminated once the cloud's teardown delay has passed (lock held)."""
        if rec.terminate_requested_at is not None:
            done_at = rec.terminate_requested_at + self.cloud.terminate_delay_s
            if now < done_at:
                raise NotYetTerminated(
                    f"fake instance {rec.instance_id}: teardown in progress "
                    f"({done_at - now:.1f}s left)"
                )
        self._mark_terminated(rec, now)

    def _mark_terminated(self, rec: FakeRecord, now: float) -> None:
        self.layout.drop_bootstrap(rec.key)
        self.layout.write(
            rec.model_copy(update={"state": "terminated", "ended_at": rec.ended_at or now})
        )

    def preempt(self, instance: Instance, grace: float = 5.0) -> None:
        """Preempt now, as the market would: the agent gets SIGTERM at once and the machine is
        killed ``grace`` seconds later (on the first provider call from then on); ``status``
        says PREEMPTED from now on. Preempting a preempted instance only brings its kill
        forward; a terminated one is :class:`Conflict`, an unknown one :class:`NotFound`."""
        grace = max(0.0, float(grace))
        now = self.clock()
        with self.layout.lock():
            rec = self._fresh(instance, now)
            if rec is None:
                raise NotFound(f"no fake instance {instance.instance_id} (key {instance.key!r})")
            if rec.state == "terminated":
                raise Conflict(f"fake instance {rec.instance_id} is terminated; nothing to preempt")
            if rec.state in ("provisioning", "running"):
                rec = rec.model_copy(update={"preempt_cause": "manual"})
                rec = self._notice(rec, now, now + grace)
            elif rec.state == "preempting" and rec.kill_at is not None:
                rec = rec.model_copy(update={"kill_at": min(rec.kill_at, now + grace)})
            self.layout.write(rec)
            rec = self._advance(rec, now)
            self._start_timer(rec, now)

    # --- lookups ----------------------------------------------------------------------------

    def _instance(self, rec: FakeRecord) -> Instance:
        machine = self._machine(rec) if rec.booted else None
        running = rec.state == "running" and machine is not None
        data: dict[str, Any] = {
            "state": rec.state,
            "run_id": rec.run_id,
            "region": Offer.model_validate(rec.offer).region,
            "machine": Offer.model_validate(rec.offer).details.get("machine"),
            "spot": rec.spot,
            "launch_index": rec.launch_index,
            "dir": str(self.layout.dir(rec.key)),
            "pid": machine.agent_pid() if machine else None,
        }
        return Instance(
            provider=self.name,
            instance_id=rec.instance_id,
            key=rec.key,
            offer=Offer.model_validate(rec.offer),
            endpoint=machine.endpoint() if running and machine is not None else None,
            created_at=datetime.fromtimestamp(rec.launched_at, UTC),
            data=data,
        )

    # --- gangs ------------------------------------------------------------------------------

    def gang_port(self, run_id: str) -> int:
        """A free port of this machine: every simulated machine shares its loopback."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def gang_address(self, head: Instance) -> str:
        return "127.0.0.1"

    def find(self, key: str) -> Instance | None:
        try:
            rec = self.layout.read(key)
        except BadInput:  # a key no launch could have used
            return None
        return None if rec is None else self._instance(rec)

    def list_instances(self) -> list[Instance]:
        """Every instance not yet terminated (preempted and failed ones included)."""
        now = self.clock()
        with self.layout.lock():
            records = [self._advance(r, now) for r in self.layout.records()]
        return [self._instance(r) for r in records if r.state != "terminated"]

    def logs(self, instance: Instance, tail: int = 200) -> str:
        with self.layout.lock():
            rec = self._fresh(instance, self.clock())
        if rec is None:
            raise NotFound(f"no fake instance {instance.instance_id} (key {instance.key!r})")
        if not rec.booted:
            return f"(instance {rec.instance_id} never booted: {rec.state})"
        return self._machine(rec).logs(tail)
