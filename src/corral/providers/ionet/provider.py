"""The IO.net provider: one CaaS deployment of one container per attempt, running corral's agent.

* **Offers** (:mod:`.offers`): hardware types with free replicas per location, priced with
  ``/price`` estimates (cached ``price_cache_s``).
* **Launch** deploys with the hardware, the location and the GPU count of the offer, the
  agent's HTTP server as the single traffic port, the boot blob in secret env variables. It is
  idempotent on the key, which the deployment's name carries: before deploying, and after an
  ambiguous deploy, the deployment is looked up by name and adopted.
* **Status** (:mod:`.deployments`): strings compared case-insensitively; a status word corral
  does not know is logged once (per word and provider) and never decides alone: a container
  with a public URL runs when it says ``running`` or when the agent answers through that URL.
  A container replaced or gone under a running deployment is PREEMPTED (IO.net documents no
  preemption), and the run recovers on a new deployment. One listing of the account's deployments serves every
  run (``list_cache_s``), and the controller's census for every belled run at once
  (``SupportsStatusListing``, by the same mapping); a running deployment's containers are read at most every
  ``containers_cache_s``. A running deployment with fewer than ``extend_below_minutes`` of its
  prepaid time left is extended by ``extend_hours``.
* **The agent** is reached at the container's ``public_url``.
* **Logs** (SupportsLogs): the container's log stream, for ``corral logs`` when the agent never
  came up.

The API key is ``IONET_API_KEY``, else ``IOCLOUD_API_KEY`` (IO.net's guide's name; secret store or
environment, ``IONET_API_KEY`` first), sent only as ``x-api-key``.
"""

from __future__ import annotations

import logging
import threading
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
    CorralError,
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
)
from corral.providers.common.create import create_or_adopt
from corral.providers.common.credentials import require_credential
from corral.providers.common.files import check_key
from corral.providers.common.listing_cache import ListingCache, census_listing
from corral.providers.common.machine_memory import MachineMemory
from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.ionet import bootstrap as boot
from corral.providers.ionet.api import IonetAPI, NameTaken
from corral.providers.ionet.deployments import (
    KNOWN_WORDS,
    Deployment,
    Worker,
    deployment_state,
    reads_containers,
)
from corral.providers.ionet.offers import build_offers
from corral.providers.ionet.settings import API_KEY_NAMES, ENV_REGISTRY_SECRET, IonetSettings
from corral.providers.listing import StatusListing, SupportsStatusListing

log = logging.getLogger("corral.providers.ionet")

_SHOWS_ENDPOINT = (InstanceState.PROVISIONING, InstanceState.RUNNING)
_GONE = ("termination requested", "destroyed")


def _secret(name: str) -> str | None:
    from corral.secrets import resolve

    return resolve(name)


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


class IonetProvider(Provider, SupportsLogs, SupportsPriceRefresh, SupportsStatusListing):
    name: ClassVar[str] = "ionet"
    shared_machines: ClassVar[bool] = True
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsSpot": "IO.net sells prepaid deployments, no interruptible tier",
        "SupportsStop": "IO.net deployments cannot be stopped and started again, only terminated",
        "SupportsVolumes": "IO.net containers have no persistent volumes; use "
        "checkpoints.storage (S3, R2)",
        "SupportsPreemptionNotice": "IO.net documents no interruption notice; a failed node's "
        "container is replaced and the run resumes from object storage",
        "SupportsSimulatedPreemption": "IO.net cannot be asked to fail a node; simulate "
        "preemptions with the fake provider",
        "SupportsGangs": "IO.net's container deployments run each container on one node "
        "(multi-node is not supported by its CaaS API)",
    }
    #: node failures per container-hour on IO.net's decentralised GPUs (an estimate until
    #: corral has observed its own), for the default checkpoint interval
    interruptions_per_hour: ClassVar[float] = 0.05

    def __init__(
        self,
        api_key: str | None = None,
        *,
        settings: IonetSettings | None = None,
        client: httpx.Client | None = None,
        home: Path | None = None,
        retry: RetryPolicy | None = None,
        bucket: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        key = require_credential("ionet", API_KEY_NAMES, api_key)
        self.settings = settings if settings is not None else IonetSettings.from_env()
        self.api = IonetAPI(
            key, self.settings, client=client, retry=retry, bucket=bucket, sleep=sleep, clock=clock
        )
        self.home = Path(home) if home is not None else paths.home()
        self.memory = MachineMemory(self.home / "ionet")
        self._sleep = sleep
        self._clock = clock
        self._cache: dict[tuple, tuple[float, Any]] = {}
        #: one listing of the account's deployments by id serves every run for list_cache_s
        self._deployments: ListingCache[str, Deployment] = ListingCache(
            self.api.deployments,
            lambda dep_id: self.api.deployment(dep_id),
            self.settings.list_cache_s,
            clock,
        )
        self._workers: dict[str, tuple[float, Worker | None, bool]] = {}
        #: status words corral does not know, each logged once
        self._words: set[tuple[str, str]] = set()
        self._words_lock = threading.Lock()

    def close(self) -> None:
        self.api.close()

    # --- offers -----------------------------------------------------------------------------

    def _cached(self, key: tuple, fetch: Callable[[], Any]) -> Any:
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self.settings.price_cache_s:
            return hit[1]
        value = fetch()
        self._cache[key] = (now, value)
        return value

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        if req.gpu_count_max == 0 and req.gpu_count_min == 0 and not req.gpu_type:
            return []
        hours = self.settings.duration_hours
        hardware = self._cached(("hardware",), self.api.hardware)
        fetched_at = datetime.now(UTC).isoformat(timespec="seconds")
        return build_offers(
            hardware,
            lambda hid, n: self._cached(
                ("loc", hid, n), lambda: self.api.available_replicas(hid, n)
            ),
            lambda hid, loc, n: self._cached(
                ("price", hid, loc, n), lambda: self.api.price(hid, loc, n, hours)
            ),
            req,
            self.settings,
            fetched_at=fetched_at,
            provider=self.name,
        )

    def refresh_prices(self) -> str | None:
        self._cache.clear()
        return datetime.now(UTC).isoformat(timespec="seconds")

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        return boot.node_profile(run_id, self.settings, self.interruptions_per_hour)

    # --- launch -----------------------------------------------------------------------------

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        check_key(key)
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the ionet provider")
        if offer.details.get("hardware_id") is None or offer.details.get("location_id") is None:
            raise BadInput(f"offer {offer.offer_id!r} is not an IO.net offer (details missing)")
        found = self._lookup(key)
        if found is not None:
            return self._instance(found, key)
        settings_auth = bootstrap.image is None and self.settings.registry_username
        secret = _secret(ENV_REGISTRY_SECRET) if settings_auth else None
        if settings_auth and not secret:
            raise AuthFailed(
                f"ionet: registry user {self.settings.registry_username!r} has no secret: "
                f"`corral secret set {ENV_REGISTRY_SECRET}`"
            )
        body = boot.deploy_body(offer, bootstrap, key, self.settings, secret)
        name = boot.deployment_name(key)

        def create() -> Instance:
            dep_id = self.api.deploy(body)
            log.info("ionet: deployed %s (%s) for %s", dep_id, name, key)
            self._touch(dep_id)
            dep = Deployment(id=dep_id, status="deployment requested", name=name)
            return self._instance(dep, key, offer)

        def adopt() -> Instance | None:
            found = self._lookup_quietly(key)
            return None if found is None else self._instance(found, key)

        def refuse(exc: CorralError) -> ProviderError | None:
            if not isinstance(exc, NameTaken):
                return None
            # the same name again would be refused again
            return ProviderError(
                f"ionet: {name} is taken by a deployment that is not this launch's or is "
                f"ending: {exc.message}",
                fields={"key": key},
            )

        return create_or_adopt(
            f"deployment {name}",
            provider="ionet",
            key=key,
            attempts=self.settings.create_attempts,
            sleep=self._sleep,
            create=create,
            adopt=adopt,
            ambiguous=(ProviderUnavailable, NameTaken),
            refuse=refuse,
        )

    def _lookup(self, key: str) -> Deployment | None:
        """The live deployment named for ``key`` (details read: they carry the key)."""
        name = boot.deployment_name(key)
        _, listed = self._deployments.listing(fresh=True)
        for dep in listed.values():
            if dep.name == name and dep.state not in _GONE:
                details = self.api.deployment(dep.id)
                if details is not None and details.env(boot.ENV_KEY) in (None, key):
                    return details.model_copy(update={"name": name})
        return None

    def _lookup_quietly(self, key: str) -> Deployment | None:
        try:
            return self._lookup(key)
        except ProviderError as exc:
            log.warning("ionet: cannot look for %s: %s", boot.deployment_name(key), exc)
            return None

    # --- reading deployments ----------------------------------------------------------------

    def _touch(self, dep_id: str) -> None:
        """``dep_id`` changed: read it directly until a listing newer than the change."""
        self._deployments.touch(dep_id)
        self._workers.pop(dep_id, None)

    def _note_word(self, what: str, word: str) -> None:
        """Log a status word IO.net does not document once, not at every poll."""
        with self._words_lock:
            if (what, word) in self._words:
                return
            self._words.add((what, word))
        log.warning(
            "ionet: %s status %r is not one corral knows: the agent answering through the "
            "container's public URL decides whether it runs (logged once)",
            what,
            word,
        )

    def _worker(self, dep_id: str) -> tuple[Worker | None, bool]:
        """The deployment's container (one saying ``running`` first, then one with a public
        URL) and whether its agent answered through that URL (asked only when its word is
        not ``running``)."""
        now = self._clock()
        cached = self._workers.get(dep_id)
        if cached is not None and now - cached[0] < self.settings.containers_cache_s:
            return cached[1], cached[2]
        workers = self.api.containers(dep_id) or []
        running = [w for w in workers if w.state == "running"]
        reachable = [w for w in workers if w.public_url]
        pick = running or reachable or workers
        worker = pick[0] if pick else None
        alive = False
        if worker is not None and worker.state != "running":
            self._note_word("container", worker.state)
            if worker.public_url:
                alive = self.api.agent_answers(worker.public_url)
        self._workers[dep_id] = (now, worker, alive)
        return worker, alive

    # --- status / terminate -----------------------------------------------------------------

    def status(self, instance: Instance) -> InstanceStatus:
        return self._deployment_status(instance, self._deployments.get(instance.instance_id))

    def statuses(self) -> StatusListing[Deployment]:
        """Every deployment of the account from one listing (``SupportsStatusListing``: a
        fresh one, which every run's :meth:`status` then shares for ``list_cache_s``), read by
        :meth:`_deployment_status` as :meth:`status` reads one. Complete when its pages agree
        (:meth:`IonetAPI.deployments`). A deployment corral changed since is asked alone."""
        return census_listing(self._deployments, self._deployment_status)

    def _deployment_status(self, instance: Instance, dep: Deployment | None) -> InstanceStatus:
        """The status of ``instance``'s deployment as IO.net answered it (None: it does not
        know it, a 404), alone or in the listing; a running one is extended when due."""
        dep_id = instance.instance_id
        if dep is not None and dep.state not in KNOWN_WORDS:
            self._note_word("deployment", dep.state)
        worker, alive = self._worker(dep_id) if reads_containers(dep) else (None, False)
        first = self.memory.first_machine(dep_id)
        state, detail = deployment_state(dep, worker, first=first, alive=alive)
        if state == InstanceState.RUNNING and worker is not None:
            if not first:
                self.memory.saw_running(dep_id, worker.identity)
            self._maybe_extend(dep_id, dep)
        endpoint = worker.public_url if worker is not None and state in _SHOWS_ENDPOINT else None
        return InstanceStatus(state=state, detail=detail, endpoint=endpoint)

    def _maybe_extend(self, dep_id: str, dep: Deployment | None) -> None:
        left = dep.compute_minutes_remaining if dep is not None else None
        if left is None or left >= self.settings.extend_below_minutes:
            return
        try:
            self.api.extend(dep_id, self.settings.extend_hours)
        except ProviderError as exc:
            log.warning("ionet: cannot extend deployment %s: %s", dep_id, exc)
            return
        log.info("ionet: extended deployment %s by %dh", dep_id, self.settings.extend_hours)
        self._touch(dep_id)

    def terminate(self, instance: Instance) -> None:
        dep_id = instance.instance_id
        dep = self.api.deployment(dep_id)
        if dep is not None and dep.env(boot.ENV_KEY) not in (None, instance.key):
            return  # not ours: never touched
        if dep is not None and dep.state not in _GONE:
            self.api.delete(dep_id)
            log.info("ionet: terminated deployment %s (%s)", dep_id, instance.key)
            self._touch(dep_id)
            after = self.api.deployment(dep_id)
            if after is not None and after.state not in _GONE:
                raise NotYetTerminated(f"ionet: deployment {dep_id} is still being terminated")
        self._touch(dep_id)
        self.memory.forget(dep_id)

    def find(self, key: str) -> Instance | None:
        try:
            check_key(key)
        except BadInput:
            return None
        dep = self._lookup(key)
        return None if dep is None else self._instance(dep, key)

    def list_instances(self) -> list[Instance]:
        """Every live deployment corral made (named for a key), for the leak sweep."""
        _, listed = self._deployments.listing(fresh=True)
        out = []
        for dep in listed.values():
            if not (dep.name or "").startswith(boot.NAME_PREFIX) or dep.state in _GONE:
                continue
            details = self.api.deployment(dep.id)
            key = details.env(boot.ENV_KEY) if details is not None else None
            if details is not None and key and boot.deployment_name(key) == dep.name:
                merged = details.model_copy(
                    update={"name": dep.name, "created_at": details.created_at or dep.created_at}
                )
                out.append(self._instance(merged, key))
        return out

    def sweep(
        self, active_keys: Iterable[str], active_runs: Iterable[str] | None = None
    ) -> list[str]:
        active = set(active_keys)
        now = datetime.now(UTC)
        swept = []
        for inst in self.list_instances():
            created = inst.created_at
            if inst.key in active or created is None:
                continue
            if now - created < timedelta(seconds=self.settings.sweep_min_age_s):
                continue
            self.api.delete(inst.instance_id)
            self._touch(inst.instance_id)
            self.memory.forget(inst.instance_id)
            swept.append(inst.instance_id)
        return swept

    # --- logs -------------------------------------------------------------------------------

    def logs(self, instance: Instance, tail: int = 200) -> str:
        """The container's last ``tail`` log lines (read for ``log_read_s`` at most)."""
        workers = self.api.containers(instance.instance_id) or []
        if not workers:
            return ""
        worker = next((w for w in workers if w.state == "running"), workers[0])
        if not worker.container_id:
            return ""
        lines = self.api.log_lines(
            instance.instance_id, worker.container_id, seconds=self.settings.log_read_s
        )
        return "\n".join(lines[-tail:])

    # --- instances --------------------------------------------------------------------------

    def _instance(self, dep: Deployment, key: str, offer: Offer | None = None) -> Instance:
        offer = offer or self._offer_of(dep)
        return Instance(
            provider=self.name,
            instance_id=dep.id,
            key=key,
            offer=offer,
            endpoint=None,
            created_at=_parse_time(dep.created_at),
            data={
                "deployment_name": dep.name or boot.deployment_name(key),
                "hardware_id": offer.details.get("hardware_id"),
                "location_id": offer.details.get("location_id"),
            },
        )

    def _offer_of(self, dep: Deployment) -> Offer:
        raw = dep.env(boot.ENV_OFFER)
        if raw:
            try:
                return Offer.model_validate_json(raw)
            except ValidationError:
                pass
        loc = dep.locations[0] if dep.locations else {}
        return Offer(
            provider=self.name,
            offer_id=f"deployment:{dep.id}",
            region=str(loc.get("iso2") or "any"),
            gpu_count=int(dep.gpus_per_container or 1),
            details={"hardware_id": dep.hardware_id, "location_id": loc.get("id")},
        )
