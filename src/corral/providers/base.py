"""The provider interface: what every place that can run a job (this machine, a cloud) offers.

A provider is one folder under ``corral/providers/`` plus one line in ``registry.py``. Core
code never names a provider; it asks for capabilities with ``isinstance(p, SupportsX)``.

Contract (the abstract-method docstrings are the contract):

* ``offers`` never launches anything and is cheap to call repeatedly.
* ``launch`` is idempotent on ``key``: calling it again with the same key (after a timeout, or
  after a controller restart) returns the instance created by the first call, never a second
  paid instance.
* ``terminate`` is idempotent: terminating a missing or already-terminated instance succeeds.
* ``status`` maps every provider state onto :class:`InstanceState`; the provider is the source
  of truth for PREEMPTED (an unreachable agent alone is not a preemption).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from corral.wire.container import ENV_IMAGE_PASSWORD, ENV_IMAGE_REGISTRY, ENV_IMAGE_USERNAME
from corral.wire.gang import GangRole
from corral.wire.machine import InstanceState
from corral.wire.plan import AgentPlan

# InstanceState lives in the wire contract; providers import it from here or from there.


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VolumeRequest(_Model):
    """A named persistent volume the machine mounts (``spec.volumes``)."""

    name: str
    size_gb: int = Field(ge=1, description="Size to create it with when it does not exist.")
    mount: str = Field(description="Absolute path on the machine.")


class Requirements(_Model):
    """What a run needs from one machine, derived from ``spec.resources`` (and
    ``spec.volumes``)."""

    gpu_type: str | None = Field(None, description="GPU model (e.g. 'L40S'); None means any.")
    gpu_count_min: int = Field(0, ge=0)
    gpu_count_max: int = Field(0, ge=0)
    cpus: float | None = None
    memory_gb: float | None = None
    disk_gb: float | None = None
    spot: bool | None = Field(
        None, description="True: spot only; False: on-demand only; None: either."
    )
    max_hourly_price: float | None = None
    providers: list[str] | None = None
    regions: list[str] | None = None
    max_runtime_s: float | None = Field(
        None,
        description="The job's limits.max_runtime (a queue refuses runs longer than it allows).",
    )
    nodes: int = Field(
        1,
        ge=1,
        description="Machines of the job's gang (spec.resources.nodes), each meeting the "
        "rest: only a provider that SupportsGangs of this size is planned for more than 1.",
    )
    image: str | None = Field(
        None,
        description="The spec's `image:`: a provider that cannot run it here says so "
        "(InfeasibleRequest) rather than run the job without it.",
    )
    volumes: list[VolumeRequest] = Field(
        default_factory=list,
        description="Named persistent volumes to mount: only offers where each can be "
        "attached (where it is, or where it can be created) fit.",
    )


class Offer(_Model):
    """One kind of machine a provider can rent out now, with its price."""

    provider: str
    offer_id: str = Field(description="Provider-specific identifier of this offer.")
    region: str = "local"
    gpu_type: str | None = None
    gpu_count: int = 0
    cpus: float | None = None
    memory_gb: float | None = None
    spot: bool = False
    price_per_hour: float = Field(0.0, ge=0, description="USD per hour for the whole machine.")
    available: bool = True
    availability: str = Field("unknown", description="'high', 'low', 'none' or 'unknown'.")
    catalog_date: str | None = Field(None, description="Date of the price data, if from a catalog.")
    details: dict[str, Any] = Field(default_factory=dict)


class NodeProfile(_Model):
    """What a provider's node needs from the agent plan (:meth:`Provider.node_profile`).

    The controller builds the plan once from the spec and this profile; the provider never
    edits the plan afterwards. The defaults describe "run on this machine": the agent on
    loopback with a free port, checkpoints where the spec says, no shutdown command, no node
    hooks.
    """

    host: str = Field("127.0.0.1", description="Interface the agent's HTTP API binds.")
    port: int = Field(0, ge=0, le=65535, description="Agent port; 0 picks a free one.")
    checkpoint_dir: str | None = Field(
        None,
        description="Where checkpoints live on the node (a persistent volume, say); None: "
        "the spec's checkpoints.dir, else one directory per run under CORRAL_HOME.",
    )
    max_grace_seconds: float | None = Field(
        None, gt=0, description="Cap on the job's grace period (a cloud's preemption notice)."
    )
    controller_timeout_s: float | None = Field(
        None,
        gt=0,
        description="How long a node whose job ended waits for a controller call before it "
        "exits, when the controller's settings give no value.",
    )
    shutdown_command: str | None = Field(
        None, description="Run when the agent exits for lack of a controller (powers off)."
    )
    node_hooks: list[str] = Field(
        default_factory=list,
        description="'module:Class' references to node hooks in the provider's own folder "
        "(see corral.wire.node); the agent imports them on the node.",
    )
    workdir: str | None = Field(
        None,
        description="Absolute path on the node where the job's code goes: the node does not "
        "share this machine's files, so the workdir is shipped there (or the git source "
        "checked out there; see corral.wire.code). None: the node sees this machine's files "
        "and the job runs in the spec's workdir in place.",
    )
    inline_code_max: int = Field(
        0,
        ge=0,
        description="The largest code bundle (bytes) the provider's bootstrap carries inside "
        "the plan: such a node has its code at boot, with no upload after its agent answers "
        "(0: never).",
    )
    install_corral: bool = Field(
        False,
        description="The node may lack this corral (a stock image, a user's image): its "
        "bootstrap installs this very version, from what Bootstrap.install says.",
    )

    container_engine: str | None = Field(
        None,
        description="A node that is not the job's image (this machine, a pool worker, a VM) "
        "runs the job's commands in its `image:` through a container engine: 'auto' (the "
        "node's CORRAL_CONTAINER_ENGINE, else podman or docker on its PATH) or the engine "
        "command the node is known to have ('docker'). None: the node itself runs in the "
        "image (a container provider), or the provider refuses `image:`.",
    )
    interruptions_per_hour: float | None = Field(
        None,
        ge=0,
        description="Documented interruptions per machine-hour on this offer, for a provider "
        "that gives no preemption notice (None: none expected, or a notice comes); the "
        "controller prefers the rate it observed itself.",
    )


class ImageRef(_Model):
    """The container image a container provider runs the node in, with the private
    registry's credentials (resolved from the secret store at launch; never logged, stored
    or returned)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: str
    username: str | None = None
    password: str | None = Field(None, repr=False)
    registry: str | None = None

    @property
    def host(self) -> str:
        """The registry host: given, else the image name's first part when it looks like a
        host (``ghcr.io/...``), else Docker Hub."""
        if self.registry:
            return self.registry
        first, sep, _ = self.name.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            return first
        return "docker.io"

    def agent_env(self) -> dict[str, str]:
        """The credentials for an agent that pulls the image itself through an engine
        (``corral.wire.container``): in its environment, never a stage's; {} without them."""
        if not (self.username and self.password):
            return {}
        return {
            ENV_IMAGE_REGISTRY: self.host,
            ENV_IMAGE_USERNAME: self.username,
            ENV_IMAGE_PASSWORD: self.password,
        }


class Bootstrap(_Model):
    """What the provider must start on the machine: corral's agent with this plan.

    ``plan`` was built once by the controller; a provider only serialises and delivers it.
    ``token`` protects the agent's HTTP API; ``env`` holds values (secrets included) the agent
    passes to the job. Neither the token nor ``env`` values may be logged.
    """

    # never echo input values in a validation error: the plan's env may hold secrets
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    plan: AgentPlan
    token: str
    env: dict[str, str] = Field(default_factory=dict)
    image: ImageRef | None = Field(
        None, description="The spec's image (container providers); None: the provider's own."
    )
    install: dict[str, str] = Field(
        default_factory=dict,
        description="For a node that may lack corral (NodeProfile.install_corral): the "
        "environment of its bootstrap (CORRAL_VERSION, the wheel's URL and sha256; see "
        "corral.providers.common.wheel). The agent drops these from its environment.",
    )
    priority: int = Field(
        5, ge=0, le=9, description="The run's priority (9 first), for a provider with a queue."
    )
    max_runtime_s: float | None = Field(
        None, description="The job's limits.max_runtime: a queue's time limit for the attempt."
    )
    gang: GangRole | None = Field(
        None,
        description="The node's place in a multi-node attempt (its rank: 0 is the head; the "
        "head's rendezvous address and port), already in ``env`` for the agent; a provider "
        "that places a gang's nodes together reads the rank here. None: a one-node attempt.",
    )


class Instance(_Model):
    """A machine launched for one attempt of one run."""

    provider: str
    instance_id: str
    key: str = Field(description="Idempotency key passed to launch (run id + attempt).")
    offer: Offer
    endpoint: str | None = Field(None, description="Base URL of the agent's HTTP API, once known.")
    created_at: datetime | None = None
    data: dict[str, Any] = Field(default_factory=dict, description="Provider-specific details.")


class InstanceStatus(_Model):
    state: InstanceState
    detail: str = ""
    endpoint: str | None = None
    queued: bool = Field(
        False,
        description="The machine waits in the provider's queue (PROVISIONING): not billed, and "
        "the provision timeout does not run yet.",
    )
    started_at: datetime | None = Field(
        None,
        description="When the machine left the provider's queue (billing and the provision "
        "timeout count from then), for a provider that queues launches.",
    )
    look_again_s: float | None = Field(
        None,
        description="The machine is about to be ready (its agent is starting on a box that "
        "answers in moments): the controller looks again this soon instead of at its next "
        "tick. Only for a provider whose status costs nothing (no rate-limited API).",
    )
    limit: str | None = Field(
        None,
        description="The job went over a limit the machine enforces (its memory) and was "
        "killed for it: why, in one line. The attempt failed; a new one would meet the same "
        "limit, so the run is not recovered.",
    )


class Capability(_Model):
    name: str
    supported: bool
    reason: str = ""


class Provider(ABC):
    """Base class of every provider. Subclasses set ``name`` and implement the four methods."""

    name: ClassVar[str]
    #: capability name -> human reason, for capabilities this provider does not have.
    unsupported: ClassVar[dict[str, str]] = {}
    #: its machines are seen alike by every controller sharing the store (a cloud's API, the
    #: pool's broker), so a live run may move from one controller to another when they share
    #: their runs out; False: they live under one ``CORRAL_HOME`` (the run stays with its
    #: controller)
    shared_machines: ClassVar[bool] = False

    @abstractmethod
    def offers(self, req: Requirements) -> list[Offer]:
        """Offers that satisfy ``req``, unavailable ones included (``available=False``).

        Raise :class:`~corral.errors.InfeasibleRequest` if no machine of this provider could
        ever satisfy ``req`` (say, more GPUs than exist) and the provider can say so for sure.
        """

    @abstractmethod
    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        """Start a machine for ``offer`` running corral's agent with ``bootstrap``.

        Idempotent on ``key``: if an instance with this key exists, return it without creating
        another. Raise :class:`~corral.errors.NoCapacity` if the offer cannot be had right now;
        the controller tries the next offer or waits.
        """

    @abstractmethod
    def status(self, instance: Instance) -> InstanceStatus:
        """The instance's state according to the provider. A missing instance is TERMINATED."""

    @abstractmethod
    def terminate(self, instance: Instance) -> None:
        """Stop paying for the instance. Must not raise if it does not exist (idempotent).

        Raise :class:`~corral.errors.NotYetTerminated` if the provider accepted the request but
        the instance is not gone yet; the caller calls again later.
        """

    @abstractmethod
    def find(self, key: str) -> Instance | None:
        """The instance launched with ``key``, if it exists (used to reconcile after a crash)."""

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        """What this provider's node needs from the agent plan of ``run_id`` on ``offer``:
        the agent's bind address, where checkpoints live, a grace cap, the controller-timeout
        default, the shutdown command and the node hooks to load. The controller builds the
        plan from the spec and this, once. The default: run as on this machine."""
        return NodeProfile()

    def list_instances(self) -> list[Instance]:
        """Every instance this provider holds for corral (used by the leak sweep)."""
        return []

    def sweep(
        self, active_keys: Iterable[str], active_runs: Iterable[str] | None = None
    ) -> list[str]:
        """The leak sweep: terminate machines this provider holds for corral whose launch key
        is not in ``active_keys`` (their run is over, or the launch was never recorded) and
        that are old enough not to be a launch in flight; with ``active_runs`` (the ids of the
        runs not yet over), also free what outlives machines (data volumes) of runs not in it.
        Returns what it asked to terminate or freed. The controller calls it every few
        minutes; the default finds nothing."""
        return []

    def release_run(self, run_id: str) -> None:
        """Free what a finished run kept beyond its machines (data volumes, say). Called once
        every machine of the run is gone; raise :class:`~corral.errors.NotYetTerminated` to
        be called again later. The default has nothing to free."""
        return None

    @classmethod
    def capabilities(cls) -> list[Capability]:
        caps = []
        for mixin in CAPABILITY_MIXINS:
            supported = issubclass(cls, mixin)
            reason = "" if supported else cls.unsupported.get(mixin.__name__, "not implemented")
            caps.append(Capability(name=mixin.__name__, supported=supported, reason=reason))
        return caps


# --- capability mixins: core checks these with isinstance, never with provider names ----------


class SupportsSpot:
    """Offers spot/interruptible machines (``Offer.spot``) that the provider may preempt."""


class SupportsStop:
    """Machines can be stopped (not billed for compute) and started again."""

    def stop(self, instance: Instance) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def start(self, instance: Instance) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class VolumeInfo(_Model):
    """One named persistent volume a provider holds (``corral volume ls``)."""

    # built on first use: only the volume commands need it
    model_config = ConfigDict(extra="forbid", defer_build=True)

    provider: str
    name: str
    volume_id: str
    region: str = Field(description="Where it lives: a data center, an availability zone.")
    size_gb: int = 0
    state: str = Field("", description="'available', 'in-use', 'creating', ...")
    attached_to: list[str] = Field(default_factory=list, description="Machines using it.")
    created_at: datetime | None = None


class SupportsVolumes:
    """Persistent volumes that outlive an instance (for checkpoints and data).

    Named volumes (``spec.volumes``, ``Requirements.volumes``) are the provider's business from
    offer to launch: ``offers`` gives only offers where every requested volume can be
    attached (where it exists, or where it can be created), ``launch`` creates what is
    missing there and mounts each at its path before the agent starts. They are never
    deleted with a run (``release_run``) nor by the leak sweep; only :meth:`remove_volume`
    deletes one."""

    def list_volumes(self) -> list[VolumeInfo]:  # pragma: no cover - interface
        """The named volumes this provider holds (every region it may use)."""
        raise NotImplementedError

    def remove_volume(self, name: str, region: str | None = None) -> list[VolumeInfo]:
        """Delete the volume(s) named ``name`` (in ``region`` only, when given) and return
        what was deleted. :class:`~corral.errors.NotFound` if there is none;
        :class:`~corral.errors.Conflict` while a machine uses one (nothing is deleted)."""
        raise NotImplementedError  # pragma: no cover - interface


class SupportsPreemptionNotice:
    """The machine learns of a coming preemption ahead of time. How is the provider's own
    business: a node hook it names in :meth:`Provider.node_profile` (a poller of the
    cloud's metadata service), or a signal to the agent."""


class SupportsLogs:
    """The provider itself keeps the machine's console logs."""

    def logs(self, instance: Instance, tail: int = 200) -> str:  # pragma: no cover - interface
        raise NotImplementedError


class SupportsSimulatedPreemption:
    """The provider can preempt one of its instances on request, the way its market would
    (``corral debug preempt``, tests, demos): the machine's processes get SIGTERM, then SIGKILL
    after ``grace`` seconds, and :meth:`Provider.status` says PREEMPTED from then on."""

    def preempt(self, instance: Instance, grace: float = 5.0) -> None:  # pragma: no cover
        """Preempt ``instance``. :class:`~corral.errors.NotFound` if the provider does not know
        it, :class:`~corral.errors.Conflict` if it is already terminated."""
        raise NotImplementedError


class RunsOnThisMachine:
    """The provider's machine is the one corral runs on: its GPUs are this machine's GPUs
    (``corral gpus`` shows them, ``corral preflight`` checks them here). Not listed among the
    capabilities a provider shows: it says where, not what."""

    def gpu_holders(self) -> list[dict[str, Any]]:  # pragma: no cover - interface
        """Each GPU of this machine (``GpuInfo.to_dict()``) with the instance ``key``,
        ``run_id`` and ``instance_id`` holding it, or None in each."""
        raise NotImplementedError


class SupportsPriceRefresh:
    """Some of the provider's prices come from a live API it caches (spot prices, say).
    ``corral offers --refresh`` calls :meth:`refresh_prices`; a provider whose prices are all
    in a dated catalog, or are read live on every ``offers`` call, does not need this."""

    def refresh_prices(self) -> str | None:  # pragma: no cover - interface
        """Drop cached prices and load them from the provider now; the next ``offers`` call
        uses them. Returns when the prices now in use were published or fetched (ISO 8601
        date or time), or None if unknown. Raise a :class:`~corral.errors.ProviderError`
        (``AuthFailed``, ``RateLimited``, ``ProviderUnavailable``...) if it cannot."""
        raise NotImplementedError


class SupportsGangs:
    """The provider can give one job several machines at once that reach one another (a gang
    for a multi-node job, ``spec.resources.nodes``): started together in one placement, with a
    network between them. A provider without it is left out of the plan of a multi-node job
    with its reason (``unsupported["SupportsGangs"]``: why its machines cannot form one).
    How a gang is formed and recovered: ``docs/multinode.md``."""

    #: the most machines one job may get from this provider
    max_nodes: ClassVar[int] = 2
    #: how the provider forms a gang, in a few words (shown with the plan's reasons)
    gang_form: ClassVar[str] = ""
    #: whether corral launches gangs here yet (False: a multi-node job is refused with
    #: ``not_available`` rather than run on one node)
    launches_gangs: ClassVar[bool] = False
    #: whether a gang's surviving nodes may idle while a lost one is replaced (a repair keeps
    #: them; False: the whole gang is relaunched, as where a gang is created and deleted whole)
    keeps_members: ClassVar[bool] = False

    def gang_port(self, run_id: str) -> int:  # pragma: no cover - interface
        """The head's first rendezvous port for a new gang of ``run_id`` (stage ``i`` of the
        plan meets on this + ``i``): a port the nodes can reach one another on."""
        raise NotImplementedError

    def gang_address(self, head: Instance) -> str:  # pragma: no cover - interface
        """The address the other nodes of a gang reach its head ``head`` at (its private
        address in the gang's network); "" while it is not known yet (a head still queued
        for a machine): the other nodes are launched once it is."""
        raise NotImplementedError


class ReportsQueue:
    """Runs wait for the provider's machines in queues of its own (a pool of GPU workers fed
    by a broker): ``corral server``'s ``/metrics`` shows each queue's length as
    ``corral_queue_length{provider, queue}`` while the provider is enabled. Not listed among
    the capabilities a provider shows: it says how runs wait, not what a job can do."""

    def queue_lengths(self) -> dict[str, int]:  # pragma: no cover - interface
        """Runs waiting in each of the provider's queues now, by queue name. Raise a
        :class:`~corral.errors.ProviderError` when the broker cannot be read."""
        raise NotImplementedError


CAPABILITY_MIXINS: tuple[type, ...] = (
    SupportsSpot,
    SupportsStop,
    SupportsVolumes,
    SupportsPreemptionNotice,
    SupportsLogs,
    SupportsSimulatedPreemption,
    SupportsGangs,
)
