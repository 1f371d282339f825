"""The SaladCloud provider: one container group per attempt, running corral's agent.

* **Offers** (:mod:`.offers`): GPU classes with their price at each priority, cached
  ``price_cache_s``; a CPU offer from estimates.
* **Launch** is idempotent on the key, which the group's name carries (:func:`group_name`)
  along with ``CORRAL_SALAD_LAUNCH_KEY`` in its environment: before creating, and after an
  ambiguous create (a timeout, a 5xx), the group is looked up by name and adopted.
* **Status** (:mod:`.groups`): SaladCloud has no preemption notice. A replica back in
  ``allocating`` after it ran, or running on another machine than the one corral first saw
  (:mod:`~corral.providers.common.machine_memory`), is PREEMPTED; the controller then deletes the group and recovers the run
  on a new one, from its last checkpoint in object storage.
* **The request budget**: SaladCloud allows 240 requests a minute per API key. Every run of a
  controller shares one token bucket for the key (``requests_per_minute`` + ``burst``, 210 by
  default) and one listing of the project's groups (``list_cache_s``); a group's instance list
  is fetched only when it is running, at most every ``instances_cache_s`` while its counts
  are steady. A controller watching 100 runs stays near 110 requests a minute
  (``benchmarks/providers.py``). The controller's census takes that listing for every
  belled run at once (``SupportsStatusListing``), read by the same mapping.
* **The agent** is reached through the group's container gateway (``https://<dns>``) on the
  agent port; the platform's startup, liveness and readiness probes call its ``/health`` and
  ``/ready``.
* **Stop/start** (SupportsStop), **logs** from SaladCloud's log service (SupportsLogs: shown
  by ``corral logs`` when the agent never came up), **simulated preemption** through the
  instance's ``reallocate`` action, and a **leak sweep** of corral's groups no run knows.

The API key is ``SALAD_API_KEY`` from corral's secret store or the environment; it is sent
only in the ``Salad-Api-Key`` header and never appears in a log line, an event or an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import httpx
from pydantic import ValidationError

from corral import paths
from corral.errors import (
    AuthFailed,
    BadInput,
    Conflict,
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
    Requirements,
    SupportsLogs,
    SupportsPriceRefresh,
    SupportsSimulatedPreemption,
    SupportsSpot,
    SupportsStop,
)
from corral.providers.common.create import create_or_adopt
from corral.providers.common.credentials import require_credential
from corral.providers.common.files import check_key
from corral.providers.common.listing_cache import ListingCache, census_listing
from corral.providers.common.machine_memory import MachineMemory
from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.listing import StatusListing, SupportsStatusListing
from corral.providers.salad import bootstrap as boot
from corral.providers.salad.api import SaladAPI
from corral.providers.salad.groups import ContainerGroup, SaladInstance, group_state
from corral.providers.salad.offers import build_offers
from corral.providers.salad.settings import (
    ENV_API_KEY,
    ENV_REGISTRY_PASSWORD,
    PRIORITIES,
    SaladSettings,
)

log = logging.getLogger("corral.providers.salad")

_SHOWS_ENDPOINT = (InstanceState.PROVISIONING, InstanceState.RUNNING)


def _secret(name: str) -> str | None:
    from corral.secrets import resolve

    return resolve(name)


class SaladProvider(
    Provider,
    SupportsSpot,
    SupportsStop,
    SupportsLogs,
    SupportsSimulatedPreemption,
    SupportsPriceRefresh,
    SupportsStatusListing,
):
    name: ClassVar[str] = "salad"
    shared_machines: ClassVar[bool] = True
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsPreemptionNotice": "SaladCloud sends no interruption notice: a node just "
        "goes away, so jobs checkpoint to object storage (the checkpoint interval follows "
        "the interruption rate)",
        "SupportsVolumes": "SaladCloud containers have no persistent volumes; use "
        "checkpoints.storage (S3, R2) for what must survive a node",
        "SupportsGangs": "SaladCloud has no networking between container instances (only "
        "inbound HTTP through its Container Gateway): the ranks of two nodes cannot meet",
    }
    #: interruptions per instance-hour by priority: the lowest priorities at the rate
    #: SaladCloud reports for its consumer nodes (1.1/h, as the fake provider's spot market
    #: uses), the higher ones estimated lower (they are not taken by other workloads, only
    #: lost with their node); corral's own observations replace them. The default checkpoint
    #: interval follows from it.
    interruptions_per_hour: ClassVar[dict[str, float]] = {
        "high": 0.1,
        "medium": 0.5,
        "low": 1.1,
        "batch": 1.1,
    }

    def __init__(
        self,
        api_key: str | None = None,
        *,
        settings: SaladSettings | None = None,
        client: httpx.Client | None = None,
        home: Path | None = None,
        retry: RetryPolicy | None = None,
        bucket: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        key = require_credential("salad", (ENV_API_KEY,), api_key)
        self.settings = settings if settings is not None else SaladSettings.from_env()
        self.settings.where()  # no organization or project: left out, with the variable named
        self.api = SaladAPI(
            key, self.settings, client=client, retry=retry, bucket=bucket, sleep=sleep, clock=clock
        )
        self.home = Path(home) if home is not None else paths.home()
        self.memory = MachineMemory(self.home / "salad")
        self._sleep = sleep
        self._clock = clock
        self._classes: tuple[float, str, list[dict[str, Any]]] | None = None
        #: one listing of the project's groups by name serves every run for list_cache_s
        self._groups: ListingCache[str, ContainerGroup] = ListingCache(
            self.api.list_groups,
            lambda name: self.api.get_group(name),
            self.settings.list_cache_s,
            clock,
            keep_direct=True,
        )
        #: group name -> (fetched at, counts signature, the replica)
        self._replicas: dict[str, tuple[float, tuple, SaladInstance | None]] = {}

    def close(self) -> None:
        self.api.close()

    # --- offers -----------------------------------------------------------------------------

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        needs_gpu = req.gpu_count_min > 0 or req.gpu_count_max > 0 or bool(req.gpu_type)
        fetched_at, classes = self._gpu_classes() if needs_gpu else (None, [])
        return build_offers(classes, req, self.settings, fetched_at=fetched_at, provider=self.name)

    def refresh_prices(self) -> str | None:
        self._classes = None
        return self._gpu_classes()[0]

    def _gpu_classes(self) -> tuple[str, list[dict[str, Any]]]:
        now = self._clock()
        cached = self._classes
        if cached is not None and now - cached[0] < self.settings.price_cache_s:
            return cached[1], cached[2]
        classes = self.api.gpu_classes()
        fetched_at = datetime.now(UTC).isoformat(timespec="seconds")
        self._classes = (now, fetched_at, classes)
        return fetched_at, classes

    # --- the node ---------------------------------------------------------------------------

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        rate = self.interruptions_per_hour.get(str(offer.details.get("priority")), 1.1)
        return boot.node_profile(run_id, self.settings, rate)

    # --- launch -----------------------------------------------------------------------------

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        check_key(key)
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the salad provider")
        if not offer.details.get("priority"):
            raise BadInput(f"offer {offer.offer_id!r} is not a SaladCloud offer (details missing)")
        name = boot.group_name(key)
        found = self._lookup(key)
        if found is not None:  # launched before (a retry, a restarted controller)
            return self._instance(found, key)
        image = bootstrap.image  # the spec's image (its credentials resolved at launch)
        settings_auth = image is None and self.settings.registry_username
        password = _secret(ENV_REGISTRY_PASSWORD) if settings_auth else None
        if settings_auth and not password:
            raise AuthFailed(
                f"salad: registry user {self.settings.registry_username!r} has no password: "
                f"`corral secret set {ENV_REGISTRY_PASSWORD}`"
            )
        env = boot.container_env(bootstrap, offer, key, self.settings)
        body = boot.create_body(offer, env, key, self.settings, password, image)

        def create() -> Instance:
            group = self.api.create_group(body)
            log.info("salad: created container group %s for %s", group.name, key)
            self._touch(group.name)
            return self._instance(group, key, offer)

        def adopt() -> Instance | None:
            found = self._lookup_quietly(key)
            return None if found is None else self._instance(found, key)

        return create_or_adopt(
            f"container group {name}",
            provider="salad",
            key=key,
            attempts=self.settings.create_attempts,
            sleep=self._sleep,
            create=create,
            adopt=adopt,
            ambiguous=(ProviderUnavailable, Conflict),  # the group may exist
        )

    def _lookup(self, key: str) -> ContainerGroup | None:
        """The group named for ``key``; one of another key under that name is a conflict."""
        group = self.api.get_group(boot.group_name(key))
        if group is None:
            return None
        owner = group.env(boot.ENV_KEY)
        if owner is not None and owner != key:
            raise Conflict(f"salad: container group {group.name} belongs to {owner!r}, not {key!r}")
        return group

    def _lookup_quietly(self, key: str) -> ContainerGroup | None:
        try:
            return self._lookup(key)
        except ProviderError as exc:
            log.warning("salad: cannot look for %s: %s", boot.group_name(key), exc)
            return None

    # --- reading groups (shared by every run) -------------------------------------------------

    def _touch(self, name: str) -> None:
        """``name`` changed: read it directly until a listing newer than the change."""
        self._groups.touch(name)
        self._replicas.pop(name, None)

    def _replica(self, group: ContainerGroup) -> SaladInstance | None:
        """The group's one replica: read from the counts while none runs (no call), from the
        instance list (cached while the counts are steady) when one does."""
        c = group.counts
        if c.running_count == 0:
            if c.stopping_count:
                return SaladInstance(state="stopping")
            return SaladInstance(state="creating" if c.creating_count else "allocating")
        signature = (group.status, c.allocating_count, c.creating_count, c.running_count)
        now = self._clock()
        cached = self._replicas.get(group.name)
        if (
            cached is not None
            and cached[1] == signature
            and now - cached[0] < self.settings.instances_cache_s
        ):
            return cached[2]
        listed = self.api.instances(group.name) or []
        running = [i for i in listed if i.word == "running"]
        replica = (running or listed)[0] if (running or listed) else None
        self._replicas[group.name] = (now, signature, replica)
        return replica

    # --- status / terminate -----------------------------------------------------------------

    def status(self, instance: Instance) -> InstanceStatus:
        return self._group_status(instance, self._groups.get(instance.instance_id))

    def statuses(self) -> StatusListing[ContainerGroup]:
        """Every group of the project from one listing (``SupportsStatusListing``: a fresh one,
        which every run's :meth:`status` then shares for ``list_cache_s``), read by
        :meth:`_group_status` as :meth:`status` reads one group. Complete only when one answer
        held every group (fewer than 100): a listing of several pages proves no group gone.
        A group corral changed since the listing was taken is asked for alone."""
        return census_listing(self._groups, self._group_status)

    def _group_status(self, instance: Instance, found: ContainerGroup | None) -> InstanceStatus:
        """The status of ``instance``'s group as SaladCloud answered it (None: it does not
        know the group, a 404), alone or in the listing."""
        name = instance.instance_id
        group = self._ours(found, instance.key)
        replica = None
        if group is not None and group.status in ("deploying", "running"):
            replica = self._replica(group)
        memory = self.memory.get(name)
        first = memory.get("machine") if isinstance(memory.get("machine"), str) else None
        state, detail = group_state(
            group,
            replica,
            first_machine=first,
            ran_before=bool(first),
            stopped_by_corral=bool(memory.get("stopped")),
        )
        if state == InstanceState.RUNNING and replica is not None and not first:
            self.memory.saw_running(name, replica.machine_id)
        endpoint = None
        if state in _SHOWS_ENDPOINT and group is not None and group.dns:
            endpoint = self._endpoint(group)
        return InstanceStatus(state=state, detail=detail, endpoint=endpoint)

    def _endpoint(self, group: ContainerGroup) -> str | None:
        dns = group.dns
        return self.settings.gateway(dns) if dns else None

    def _ours(self, group: ContainerGroup | None, key: str) -> ContainerGroup | None:
        if group is None:
            return None
        owner = group.env(boot.ENV_KEY)
        return group if owner in (None, key) else None

    def terminate(self, instance: Instance) -> None:
        name = instance.instance_id
        group = self._ours(self.api.get_group(name), instance.key)
        if group is not None:
            try:
                self.api.delete_group(name)
            except Conflict as exc:  # a change under way: the controller calls again
                raise NotYetTerminated(exc.message, fields=exc.fields) from None
            log.info("salad: deleted container group %s (%s)", name, instance.key)
            self._touch(name)
            if self._ours(self.api.get_group(name), instance.key) is not None:
                raise NotYetTerminated(f"salad: container group {name} is still being deleted")
        self._touch(name)
        self.memory.forget(name)

    def find(self, key: str) -> Instance | None:
        try:
            check_key(key)
        except BadInput:
            return None
        try:
            group = self._lookup(key)
        except Conflict:
            return None
        return None if group is None else self._instance(group, key)

    def list_instances(self) -> list[Instance]:
        """Every container group corral launched (named for a key), for the leak sweep."""
        _, groups = self._groups.listing(fresh=True)
        out = []
        for group in groups.values():
            key = group.env(boot.ENV_KEY)
            if key and group.name == boot.group_name(key):
                out.append(self._instance(group, key))
        return out

    def sweep(
        self, active_keys: Iterable[str], active_runs: Iterable[str] | None = None
    ) -> list[str]:
        """Delete corral's groups whose key no open resource knows, once older than
        ``sweep_min_age_s`` (younger ones may be a launch in flight)."""
        active = set(active_keys)
        now = datetime.now(UTC)
        swept = []
        for inst in self.list_instances():
            if inst.key in active:
                continue
            created = inst.created_at
            if created is None or now - created < timedelta(seconds=self.settings.sweep_min_age_s):
                continue
            try:
                self.api.delete_group(inst.instance_id)
            except Conflict as exc:  # a change under way: the next sweep tries again
                log.warning("salad: leaked group %s not deleted yet: %s", inst.instance_id, exc)
                continue
            self._touch(inst.instance_id)
            self.memory.forget(inst.instance_id)
            swept.append(inst.instance_id)
        return swept

    # --- stop / start (SupportsStop) --------------------------------------------------------

    def stop(self, instance: Instance) -> None:
        """Stop the group: no instance runs or is billed; ``status`` says STOPPED."""
        self._stopped(instance.instance_id, True, self.api.stop_group)

    def start(self, instance: Instance) -> None:
        """Start a stopped group again (on whatever node SaladCloud allocates)."""
        self._stopped(instance.instance_id, False, self.api.start_group)

    def _stopped(self, name: str, stopped: bool, call: Callable[[str], None]) -> None:
        """Remember whether corral stopped ``name`` (before the call: a status read while it
        is under way must know), then ``call`` it; a call SaladCloud refused (409) leaves what
        was remembered before."""
        before = bool(self.memory.get(name).get("stopped"))
        self.memory.set_stopped(name, stopped)
        try:
            call(name)
        except Conflict:
            self.memory.set_stopped(name, before)
            raise
        self._touch(name)

    # --- simulated preemption ---------------------------------------------------------------

    def preempt(self, instance: Instance, grace: float = 5.0) -> None:
        """Reallocate the group's running instance to another node, as a node going away
        would (SaladCloud gives no grace: ``grace`` is not used)."""
        name = instance.instance_id
        group = self._ours(self.api.get_group(name), instance.key)
        if group is None:
            raise NotFound(f"salad: container group {name} does not exist")
        listed = self.api.instances(name) or []
        running = [i for i in listed if i.word == "running"]
        if not running:
            raise Conflict(f"salad: container group {name} has no running instance to preempt")
        self.api.reallocate(name, running[0].id)
        self._touch(name)

    # --- logs (SupportsLogs) ----------------------------------------------------------------

    def logs(self, instance: Instance, tail: int = 200) -> str:
        """The container's last ``tail`` lines from SaladCloud's log service (the last day)."""
        end = datetime.now(UTC)
        start = end - timedelta(days=1)
        query = f'resource.labels.container_group_name = "{instance.instance_id}"'
        items = self.api.log_entries(
            query,
            start.isoformat().replace("+00:00", "Z"),
            end.isoformat().replace("+00:00", "Z"),
            page_size=max(1, min(100, tail)),
        )
        lines = []
        for item in reversed(items):  # newest first from the API
            text = item.get("text_log")
            if text is None and item.get("json_log") is not None:
                text = str(item.get("json_log"))
            lines.append(f"{item.get('time', '')} {text or ''}".rstrip())
        return "\n".join(lines[-tail:])

    # --- instances --------------------------------------------------------------------------

    def _instance(self, group: ContainerGroup, key: str, offer: Offer | None = None) -> Instance:
        offer = offer or self._offer_of(group)
        created = None
        if group.create_time:
            try:
                created = datetime.fromisoformat(group.create_time.replace("Z", "+00:00"))
            except ValueError:
                created = None
        return Instance(
            provider=self.name,
            instance_id=group.name,
            key=key,
            offer=offer,
            endpoint=self._endpoint(group),
            created_at=created,
            data={
                "container_group_id": group.id,
                "priority": offer.details.get("priority"),
                "gpu_class": offer.details.get("gpu_class"),
            },
        )

    def _offer_of(self, group: ContainerGroup) -> Offer:
        """The offer a group was launched for (kept in its env), or one rebuilt from it."""
        raw = group.env(boot.ENV_OFFER)
        if raw:
            try:
                return Offer.model_validate_json(raw)
            except ValidationError:
                pass
        resources = group.container.get("resources") or {}
        classes = resources.get("gpu_classes") or []
        priority = group.priority if group.priority in PRIORITIES else "batch"
        return Offer(
            provider=self.name,
            offer_id=f"group:{group.name}",
            region="any",
            gpu_count=1 if classes else 0,
            spot=priority != "high",
            details={"gpu_class_id": classes[0] if classes else None, "priority": priority},
        )
