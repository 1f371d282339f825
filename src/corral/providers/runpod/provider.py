"""The RunPod provider: GPU pods (on-demand and spot) running corral's agent.

* **Offers** (:mod:`.offers`): REST v2's GPU catalog (on-demand prices and stock) and
  GraphQL's spot prices, cached ``price_cache_s``.
* **Launch** is idempotent on the key, which the pod's name carries (``corral-<key>``):
  before creating, and after any ambiguous create (a timeout or a 5xx: RunPod has answered
  500 to a create whose pod then existed and billed), the pod is looked up by name and
  adopted; only when none exists is the create tried again (``create_attempts`` in all).
  On-demand pods are created through REST v2 (``POST /v2/pods``), spot pods through GraphQL
  (``podRentInterruptable``, bidding the offer's price per GPU; REST v2 has no spot option),
  and so are on-demand pods of a job with CPU or memory minimums (``podFindAndDeployOnDemand``
  with ``minVcpuCount``/``minMemoryInGb``: REST v2 has no field for either on a GPU pod).
  A spot create RunPod refuses for a reason other than a transient one is
  :class:`NoCapacity`: the controller goes on to the next offer (on-demand, when the job
  allows it). Should two pods ever carry one key, the provider keeps one and terminates the
  others.
* **Status** maps every pod state (:mod:`.pods`); a spot pod RunPod stopped is PREEMPTED.
  The controller's census reads every lone pod from one ``GET /v2/pods`` instead
  (``SupportsStatusListing``), by the same mapping.
* **Terminate** deletes the pod (and any other pod named for the key); a missing pod is
  success; a pod whose name is not corral's for the key is never touched.
* **The agent** is reached through RunPod's HTTP proxy:
  ``https://<pod-id>-<port>.proxy.runpod.net`` (``proxy_url`` overrides it).
* **Stop/start** (SupportsStop, ``POST /v2/pods/{id}/action``) and **network volumes**
  (SupportsVolumes, ``/v2/network-volumes``): a configured
  volume (``network_volume_id``) is mounted in every pod for checkpoints, and pins pods to
  its data center.
* **Logs** (SupportsLogs, ``GET /v2/pods/{id}/logs``): the container's log stream, read for
  ``log_read_s`` (it follows and may never end), for ``corral logs`` when the agent never came
  up. RunPod keeps a pod's log only while the pod exists.

The API key is ``CORRAL_RUNPOD_API_KEY`` or RunPod's own ``RUNPOD_API_KEY`` (the first set one,
each from corral's secret store, then the environment); it is sent only in the Authorization
header and never appears in a log line, an event or an error.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx
from pydantic import ValidationError

from corral import paths
from corral.errors import (
    AuthFailed,
    BadInput,
    InfeasibleRequest,
    NoCapacity,
    NotYetTerminated,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    RateLimited,
    UnsupportedCapability,
)
from corral.providers.base import (
    Bootstrap,
    ImageRef,
    Instance,
    InstanceState,
    InstanceStatus,
    NodeProfile,
    Offer,
    Provider,
    Requirements,
    SupportsLogs,
    SupportsPriceRefresh,
    SupportsSpot,
    SupportsStop,
    SupportsVolumes,
    VolumeInfo,
)
from corral.providers.common.create import create_or_adopt
from corral.providers.common.credentials import require_credential
from corral.providers.common.files import check_key
from corral.providers.http import RetryPolicy
from corral.providers.listing import StatusListing, SupportsStatusListing
from corral.providers.runpod import bootstrap as boot
from corral.providers.runpod.api import RunPodAPI
from corral.providers.runpod.gang import CLUSTER_ID, RunPodGangs
from corral.providers.runpod.gpus import canonical_name
from corral.providers.runpod.marks import StoppedMarks
from corral.providers.runpod.offers import Prices, build_offers, gpu_count
from corral.providers.runpod.pods import Pod, pod_state
from corral.providers.runpod.settings import API_KEY_NAMES, ENV_API_KEY, RunPodSettings
from corral.providers.runpod.volumes import NamedVolumes

log = logging.getLogger("corral.providers.runpod")

_SHOWS_ENDPOINT = (InstanceState.PROVISIONING, InstanceState.RUNNING)


def _sells_spot(gpu: dict[str, Any]) -> bool:
    """Whether GraphQL gives a spot price for this GPU type (in either cloud)."""
    lowest = [gpu.get(c) for c in ("secure", "community")]
    prices = [d.get("minimumBidPrice") for d in lowest if isinstance(d, dict)]
    prices += [gpu.get("secureSpotPrice"), gpu.get("communitySpotPrice")]
    return any(isinstance(p, int | float) and not isinstance(p, bool) and p > 0 for p in prices)


class RunPodProvider(
    Provider,
    SupportsSpot,
    SupportsStop,
    SupportsVolumes,
    SupportsLogs,
    SupportsPriceRefresh,
    SupportsStatusListing,
    RunPodGangs,
):
    name: ClassVar[str] = "runpod"
    shared_machines: ClassVar[bool] = True
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsPreemptionNotice": "RunPod has no interruption notice to poll: a spot pod "
        "gets SIGTERM at most 5 s before SIGKILL, so jobs must checkpoint often",
        "SupportsSimulatedPreemption": "RunPod cannot be asked to interrupt a pod; simulate "
        "preemptions with the fake provider",
    }

    def __init__(
        self,
        api_key: str | None = None,
        *,
        settings: RunPodSettings | None = None,
        client: httpx.Client | None = None,
        home: Path | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
    ):
        key = require_credential(
            "runpod",
            API_KEY_NAMES,
            api_key,
            hint=f"`corral secret set {ENV_API_KEY}` or export {ENV_API_KEY} "
            f"(or {API_KEY_NAMES[0]}, which wins when both are set)",
        )
        self.settings = settings if settings is not None else RunPodSettings.from_env()
        self.api = RunPodAPI(
            key, self.settings, client=client, retry=retry, sleep=sleep, clock=clock
        )
        self.home = Path(home) if home is not None else paths.home()
        self.marks = StoppedMarks(self.home / "runpod")
        self._sleep = sleep
        self._clock = clock
        self._now = now  # wall clock: how old a cluster is (its createdAt)
        self._prices: dict[int, tuple[float, Any]] = {}
        self._spot: dict[int, tuple[float, Any]] = {}
        self._volume_dc: str | None = None
        self.named = NamedVolumes(self.api, self.settings, self.name)

    def close(self) -> None:
        self.api.close()

    # --- offers -----------------------------------------------------------------------------

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        count = gpu_count(req)
        gang = req.nodes > 1  # an Instant Cluster: on-demand Secure Cloud pods only
        if gang and req.spot is True:
            raise InfeasibleRequest(
                "runpod: an Instant Cluster has on-demand pods only: a multi-node job needs "
                "`resources.spot: false` (or auto)"
            )
        prices = self._catalog(count)
        if req.spot is not False and not gang:
            prices.spot, prices.spot_error = self._spot_prices(count)
        pinned, new_volume = self.named.placement(req)
        clouds: list[str] = [c for c in self.settings.cloud_types if not gang or c == "SECURE"]
        return build_offers(
            prices,
            req,
            cloud_types=clouds,
            container_disk_gb=self.settings.container_disk_gb,
            volume_dc=self._volume_data_center() if pinned is None else pinned,
            new_volume=new_volume,
            provider=self.name,
        )

    def refresh_prices(self) -> str | None:
        """Drop the cached prices and fetch them now; returns when they were fetched."""
        self._prices.clear()
        self._spot.clear()
        return self._catalog(1).fetched_at

    def _fresh(self, cached: tuple[float, Any] | None) -> bool:
        return cached is not None and self._clock() - cached[0] < self.settings.price_cache_s

    def _catalog(self, count: int) -> Prices:
        """On-demand prices and stock for ``count`` GPUs per cloud (REST v2 catalog)."""
        cached = self._prices.get(count)
        if cached is None or not self._fresh(cached):
            catalog: dict[str, list[dict[str, Any]]] = {
                c: self.api.gpu_catalog(count, c) for c in self.settings.cloud_types
            }
            fetched_at = datetime.now(UTC).isoformat(timespec="seconds")
            cached = (self._clock(), (fetched_at, catalog))
            self._prices[count] = cached
        fetched_at, catalog = cached[1]
        return Prices(catalog=catalog, fetched_at=fetched_at)

    def _spot_prices(self, count: int) -> tuple[list[dict[str, Any]] | None, str]:
        """GraphQL's spot prices, or None and why when there are none to be had."""
        cached = self._spot.get(count)
        if cached is None or not self._fresh(cached):
            answer: tuple[list[dict[str, Any]] | None, str]
            try:
                types = self.api.spot_prices(count)
            except (AuthFailed, RateLimited):
                raise
            except ProviderError as exc:
                log.warning("runpod: no spot prices: %s", exc.message)
                answer = (None, f"GraphQL gpuTypes failed: {exc.message}")
            else:
                sold = [t for t in types if _sells_spot(t)]
                answer = (sold, "") if sold else (None, "RunPod lists no spot price")
            cached = (self._clock(), answer)
            self._spot[count] = cached
        return cached[1]

    def _volume_data_center(self) -> str | None:
        volume_id = self.settings.network_volume_id
        if not volume_id:
            return None
        if self._volume_dc is None:
            volume = self.api.get_volume(volume_id)
            if volume is None:
                raise BadInput(f"runpod: network volume {volume_id!r} does not exist")
            self._volume_dc = volume.data_center or None
        return self._volume_dc

    # --- the node ---------------------------------------------------------------------------

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        """What a pod needs from the plan: the agent on every interface on the agent port
        (exposed through RunPod's proxy), checkpoints on the network volume when one is
        mounted (the next attempt, in a new pod, resumes from them), and the pod's
        controller timeout. The shutdown command (it needs the pod's python) is set by
        :mod:`.boot` when it starts the agent."""
        return boot.node_profile(run_id, self.settings)

    # --- launch -----------------------------------------------------------------------------

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        check_key(key)
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the runpod provider")
        needed = ("gpu_type_id", "cloud_type") + (("bid_per_gpu",) if offer.spot else ())
        if any(offer.details.get(k) in (None, "") for k in needed):
            raise BadInput(f"offer {offer.offer_id!r} is not a RunPod offer (details missing)")
        if bootstrap.gang is not None:  # a node of a gang: the pod of its rank in a cluster
            return self._launch_node(offer, bootstrap, key)
        found = self._lookup(key)
        if found is not None:  # launched before (a retry, a restarted controller)
            return self._instance(found, key)
        env = boot.pod_env(bootstrap, offer, key, self.settings)
        mount = self.named.ensure(offer)
        image = bootstrap.image.name if bootstrap.image else None
        auth = self._registry_auth(bootstrap.image) if bootstrap.image else None

        def create() -> Instance:
            pod = self._create(offer, env, key, mount, image, auth)
            log.info("runpod: created pod %s for %s", pod.id, key)
            return self._instance(pod, key, offer)

        def adopt() -> Instance | None:
            found = self._lookup_after_failure(key)
            return None if found is None else self._instance(found, key)

        # a timeout or a 5xx: the pod may exist
        return create_or_adopt(
            f"pod {boot.pod_name(key)}",
            provider="runpod",
            key=key,
            attempts=self.settings.create_attempts,
            sleep=self._sleep,
            create=create,
            adopt=adopt,
        )

    def _create(
        self,
        offer: Offer,
        env: dict[str, str],
        key: str,
        mount: tuple[str, str] | None,
        image: str | None = None,
        auth: str | None = None,
    ) -> Pod:
        s = self.settings
        extra: dict[str, Any] = {"mount": mount, "image": image, "registry_auth_id": auth}
        if not offer.spot and boot.keeps_host_minimums(offer):
            # the job's vCPU and memory minimums: REST v2 has no field for them, GraphQL has
            return self.api.deploy_on_demand(boot.spot_input(offer, env, key, s, **extra))
        if not offer.spot:
            return self.api.create_pod(boot.rest_body(offer, env, key, s, **extra))
        try:
            return self.api.rent_interruptable(boot.spot_input(offer, env, key, s, **extra))
        except (NoCapacity, ProviderUnavailable, RateLimited, AuthFailed, QuotaExceeded):
            raise
        except ProviderError as exc:
            # spot pods are no longer documented and may no longer be sold: not this offer,
            # but the next one (on-demand, if the job takes it) may do
            raise NoCapacity(
                f"runpod: no spot pod for this offer ({exc.message}); spot pods may no longer "
                "be sold",
                fields={"key": key},
            ) from None

    def _registry_auth(self, image: ImageRef) -> str | None:
        """The id of RunPod's copy of the image's registry credentials (made once: named by a
        digest of host, user and password, so a changed password makes a new one)."""
        if not image.username or not image.password:
            return None
        digest = hashlib.sha256(
            f"{image.host}\0{image.username}\0{image.password}".encode()
        ).hexdigest()[:20]
        name = f"corral-{digest}"
        for auth in self.api.registry_auths():
            if auth.get("name") == name:
                return str(auth["id"])
        return self.api.create_registry_auth(name, image.username, image.password)

    def _lookup_after_failure(self, key: str) -> Pod | None:
        try:
            return self._lookup(key)
        except ProviderError as exc:
            log.warning("runpod: cannot look for pod %s: %s", boot.pod_name(key), exc)
            return None

    def _lookup(self, key: str, *, dedupe: bool = True) -> Pod | None:
        """The live pod named for ``key``. If several exist (a create that was answered with
        an error but went through, then a retry), one is kept and the others terminated."""
        pods = [
            p for p in self.api.list_pods(name=boot.pod_name(key)) if p.state_word != "TERMINATED"
        ]
        if not pods:
            return None
        pods.sort(key=lambda p: (p.state_word != "RUNNING", p.id))
        keep, extra = pods[0], pods[1:]
        if dedupe:
            for pod in extra:
                log.warning("runpod: second pod %s for %s: terminating it", pod.id, key)
                self.api.delete_pod(pod.id)
        return keep

    # --- status / terminate -----------------------------------------------------------------

    def _endpoint(self, pod_id: str) -> str:
        return self.settings.proxy_url.format(pod_id=pod_id, port=self.settings.agent_port)

    def _ours(self, pod: Pod | None, key: str) -> Pod | None:
        """``pod`` unless it carries another name than the key's (an answer without a name
        cannot tell, and the id came from corral's own record)."""
        if pod is None or pod.name not in ("", boot.pod_name(key)):
            return None
        return pod

    def status(self, instance: Instance) -> InstanceStatus:
        if instance.data.get(CLUSTER_ID):
            return self._node_status(instance)
        return self._pod_status(instance, self.api.get_pod(instance.instance_id))

    def statuses(self) -> StatusListing[Pod]:
        """Every lone pod of the account from one ``GET /v2/pods`` (``SupportsStatusListing``),
        read by :meth:`_pod_status` as :meth:`status` reads one pod. The list has no pages:
        one answer holds every pod (the document's ``ListPodsResponse``), so it is complete
        for lone pods; a node of an Instant Cluster (left out of the list) is asked alone."""
        pods = {p.id: p for p in self.api.list_pods()}
        return StatusListing(
            pods, self._pod_status, complete=True, covers=lambda i: not i.data.get(CLUSTER_ID)
        )

    def _pod_status(self, instance: Instance, found: Pod | None) -> InstanceStatus:
        """The status of ``instance``'s pod as RunPod answered it (None: RunPod does not know
        it, a 404), alone or in the list."""
        pod = self._ours(found, instance.key)
        state, detail = pod_state(
            pod,
            spot=instance.offer.spot,
            stopped_by_corral=instance.instance_id in self.marks,
        )
        endpoint = self._endpoint(instance.instance_id) if state in _SHOWS_ENDPOINT else None
        return InstanceStatus(state=state, detail=detail, endpoint=endpoint)

    def terminate(self, instance: Instance) -> None:
        if instance.data.get(CLUSTER_ID):  # RunPod deletes a cluster whole
            return self._terminate_node(instance)
        pod = self._ours(self.api.get_pod(instance.instance_id), instance.key)
        if pod is not None and pod.state_word != "TERMINATED":
            self.api.delete_pod(pod.id)
            log.info("runpod: terminated pod %s (%s)", pod.id, instance.key)
        for other in self.api.list_pods(name=boot.pod_name(instance.key)):
            if other.id != instance.instance_id and other.state_word != "TERMINATED":
                log.warning("runpod: terminating pod %s, also named for %s", other.id, instance.key)
                self.api.delete_pod(other.id)
        after = self._ours(self.api.get_pod(instance.instance_id), instance.key)
        if after is not None and after.state_word != "TERMINATED":
            raise NotYetTerminated(f"runpod: pod {after.id} is still being terminated")
        self.marks.discard(instance.instance_id)

    def find(self, key: str) -> Instance | None:
        try:
            check_key(key)
        except BadInput:
            return None
        pod = self._lookup(key, dedupe=False)
        return self._find_node(key) if pod is None else self._instance(pod, key)

    def list_instances(self) -> list[Instance]:
        """Every live pod corral launched (named ``corral-<key>``), for the leak sweep."""
        out = []
        for pod in self.api.list_pods():
            key = boot.key_of(pod.name)
            if key is not None and pod.state_word != "TERMINATED":
                out.append(self._instance(pod, key))
        return out + self._cluster_instances()

    # --- stop / start (SupportsStop) --------------------------------------------------------

    def stop(self, instance: Instance) -> None:
        """Stop the pod: no GPU billed, its volume disk kept. ``status`` says STOPPED."""
        self._not_in_cluster(instance, "stopped")
        self.marks.add(instance.instance_id)
        self.api.stop_pod(instance.instance_id)

    def start(self, instance: Instance) -> None:
        """Start a stopped pod again (a spot pod bids the offer's price again)."""
        self._not_in_cluster(instance, "started")
        self.marks.discard(instance.instance_id)
        if instance.offer.spot:
            bid = float(instance.offer.details.get("bid_per_gpu") or 0.0)
            self.api.bid_resume(instance.instance_id, bid, max(1, instance.offer.gpu_count))
        else:
            self.api.start_pod(instance.instance_id)

    def _not_in_cluster(self, instance: Instance, what: str) -> None:
        if instance.data.get(CLUSTER_ID):
            raise UnsupportedCapability(
                self.name,
                "SupportsStop",
                f"a pod of an Instant Cluster cannot be {what} (RunPod creates and deletes "
                "clusters whole)",
            )

    # --- network volumes (SupportsVolumes) --------------------------------------------------

    def create_volume(self, name: str, size_gb: int, data_center_id: str) -> dict[str, Any]:
        """A network volume (``{id, name, size, dataCenter, type}``); set its id as
        ``network_volume_id`` to mount it in every pod."""
        return self.api.create_volume(name, size_gb, data_center_id).model_dump(by_alias=True)

    def volumes(self) -> list[dict[str, Any]]:
        return [v.model_dump(by_alias=True) for v in self.api.list_volumes()]

    def delete_volume(self, volume_id: str) -> None:
        """Delete a network volume; a missing one is success."""
        self.api.delete_volume(volume_id)

    def list_volumes(self) -> list[VolumeInfo]:
        """Every network volume of the account, with the pods mounting it."""
        return self.named.list()

    def remove_volume(self, name: str, region: str | None = None) -> list[VolumeInfo]:
        return self.named.remove(name, region)

    # --- logs (SupportsLogs) ----------------------------------------------------------------

    def logs(self, instance: Instance, tail: int = 200) -> str:
        """The pod's last ``tail`` log lines, from its log stream read for ``log_read_s``.
        NotFound once the pod is gone (RunPod keeps no log of a terminated pod)."""
        lines = self.api.pod_log(instance.instance_id, tail=tail, seconds=self.settings.log_read_s)
        return "\n".join(lines)

    # --- instances --------------------------------------------------------------------------

    def _instance(self, pod: Pod, key: str, offer: Offer | None = None) -> Instance:
        offer = offer or self._offer_of(pod)
        return Instance(
            provider=self.name,
            instance_id=pod.id,
            key=key,
            offer=offer,
            endpoint=self._endpoint(pod.id),
            created_at=None,
            data={
                "pod_name": pod.name or boot.pod_name(key),
                "spot": offer.spot,
                "gpu_type_id": offer.details.get("gpu_type_id"),
                "cloud_type": offer.details.get("cloud_type"),
                "data_center_id": offer.details.get("data_center_id"),
                "cost_per_hr": pod.cost,
            },
        )

    def _offer_of(self, pod: Pod) -> Offer:
        """The offer a pod was launched for (kept in its env), or one rebuilt from the pod."""
        raw = pod.env_value(boot.ENV_OFFER)
        if raw:
            try:
                return Offer.model_validate_json(raw)
            except ValidationError:
                pass
        gpu = pod.gpu or {}
        gpu_id = str(gpu.get("id") or "")
        return Offer(
            provider=self.name,
            offer_id=f"pod:{pod.id}",
            region=pod.data_center_id or "any",
            gpu_type=canonical_name(gpu_id) if gpu_id else None,
            gpu_count=int(gpu.get("count") or 0),
            spot=False,  # a v2 pod does not say; corral's own pods carry their offer
            price_per_hour=max(0.0, pod.cost or 0.0),
            details={"gpu_type_id": gpu_id} if gpu_id else {},
        )
