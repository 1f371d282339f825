"""RunPod's API: REST v2 for pods, network volumes and the GPU catalog; GraphQL for spot pods
(REST v2 has no spot option) and spot prices.

REST v1 (``rest.runpod.io/v1``) was retired on 2026-11-15 and is never called. v2 differs
from it in ways the client takes care of: lists come wrapped (``{"pods": [...]}``,
``{"networkVolumes": [...]}``), the list of pods has no name filter (the name is matched
here), stop and start are ``POST /pods/{id}/action`` (409 when the action does not fit the
pod's status), a pod says ``status`` (PROVISIONING, STARTING, RUNNING, EXITED, ERROR,
TERMINATED) and ``cost``, and errors are RFC 9457 problem details. A pod's log is a stream of
Server-Sent Events (``GET /pods/{id}/logs``, read by :mod:`.podlog`).

Both go through :class:`~corral.providers.http.ProviderHTTP` (User-Agent, retries honouring
``Retry-After``, typed errors, no key in any message) on one injected :class:`httpx.Client`,
with one request budget per API key that RunPod's ``RateLimit`` headers hold off
(:mod:`.limits`). Creates are never retried here on a timeout or a 5xx: RunPod has been
seen to answer 500 after creating the pod, so the provider looks the pod up by name first.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Any, cast

import httpx

from corral.errors import NoBalance, NotFound, ProviderError, QuotaExceeded
from corral.providers.http import ProviderHTTP, ResourceNotFound, RetryPolicy
from corral.providers.runpod import graphql as gql
from corral.providers.runpod.limits import RateLimitWatch, api_bucket
from corral.providers.runpod.podlog import read_pod_log
from corral.providers.runpod.pods import Cluster, NetworkVolume, Pod
from corral.providers.runpod.settings import RunPodSettings

PROVIDER = "runpod"
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: how RunPod's GraphQL says the account cannot pay (REST v2 says 402)
_BALANCE = re.compile(r"(?i)\b(balance|funds|credits?)\b")
#: pod statuses in which a stop has nothing left to do, and those in which a start has not
_STOPPED = frozenset({"EXITED", "TERMINATED"})
_STARTED = frozenset({"PROVISIONING", "STARTING", "RUNNING"})


def check_id(value: str, what: str = "pod") -> str:
    """An id safe to put in a URL path or a GraphQL string; anything else is NotFound."""
    if not isinstance(value, str) or not _ID.match(value):
        raise NotFound(f"runpod: {value!r} is not a {what} id")
    return value


def _no_balance(exc: ProviderError) -> NoBalance:
    return NoBalance(
        f"{exc.message} (the RunPod account has no balance left for a pod: add funds in the "
        "RunPod console; no other RunPod offer is tried for this launch)",
        fields=exc.fields,
    )


def _create_error(exc: ProviderError) -> ProviderError:
    """A failed ``POST /v2/pods`` as the published document reads it (its operation's table):
    402 no balance (stop: no candidate will succeed); 403 the account cannot use that GPU
    pool (skip this candidate); 400 a broken cross-field rule or no capacity there (next
    candidate; :class:`NoCapacity` when the detail says capacity); 409 is not defined for
    this path, so it is no capacity claim either. Others as :func:`error_for` typed them."""
    status = exc.fields.get("status")
    if status == 402 or (isinstance(exc, QuotaExceeded) and _BALANCE.search(exc.message)):
        return _no_balance(exc)
    if status == 403:
        return ProviderError(
            f"{exc.message} (the RunPod account cannot use this GPU pool: the next offer is tried)",
            fields=exc.fields,
        )
    if status == 409:
        return ProviderError(exc.message, fields=exc.fields)
    return exc


def _listed(body: Any, key: str, what: str) -> list[dict[str, Any]]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ProviderError(f"runpod: {what} did not answer with a list ({key!r})")
    return [i for i in items if isinstance(i, dict) and i.get("id")]


class RunPodAPI:
    def __init__(
        self,
        api_key: str,
        settings: RunPodSettings,
        *,
        client: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ):
        self._client = client or httpx.Client()
        self._owns_client = client is None
        self._key = api_key
        self._clock = clock
        # one bucket per key (RunPod counts the key's requests, whoever sends them), held off
        # by RunPod's RateLimit headers (.limits)
        bucket = api_bucket(PROVIDER, api_key, settings.rate_per_s, clock=clock, sleep=sleep)
        watched = cast(httpx.Client, RateLimitWatch(self._client, bucket))
        common: dict[str, Any] = dict(
            client=watched,
            token=api_key,
            retry=retry,
            bucket=bucket,
            sleep=sleep,
            clock=clock,
            now=now,
            rng=rng,
        )
        self.rest = ProviderHTTP(PROVIDER, settings.rest_url, **common)
        self.gql = ProviderHTTP(PROVIDER, settings.graphql_url, **common)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    # --- pods (REST v2) ---------------------------------------------------------------------

    def list_pods(self, name: str | None = None) -> list[Pod]:
        """Pods of the account (those named ``name`` only, when given: v2 has no name
        filter, so it is applied here)."""
        body = self.rest.get_json("/pods", params={"includeClusterPods": "false"})
        pods = [Pod.model_validate(p) for p in _listed(body, "pods", "GET /pods")]
        return [p for p in pods if name is None or p.name == name]

    def get_pod(self, pod_id: str) -> Pod | None:
        """The pod, or None if RunPod does not know it (any more)."""
        try:
            body = self.rest.get_json(f"/pods/{check_id(pod_id)}")
        except (ResourceNotFound, NotFound):
            return None
        return Pod.model_validate(body) if isinstance(body, dict) and body.get("id") else None

    def create_pod(self, body: dict[str, Any]) -> Pod:
        """``POST /v2/pods``. Its failures read as the published document's table for it
        says (:func:`_create_error`)."""
        try:
            answer = self.rest.post_json("/pods", json=body)
        except ProviderError as exc:
            raise _create_error(exc) from None
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError("runpod: POST /pods answered without a pod id")
        return Pod.model_validate(answer)

    def _action(self, pod_id: str, action: str, done: frozenset[str]) -> None:
        """``POST /pods/{id}/action``. A 409 (the action does not fit the pod's status) is
        success when the pod is already where the action leads (``done``)."""
        path = f"/pods/{check_id(pod_id)}/action"
        resp = self.rest.request(
            "POST", path, json={"action": action}, idempotent=True, allow=(409,)
        )
        if resp.status_code != 409:
            return
        pod = self.get_pod(pod_id)
        if pod is None:
            raise ResourceNotFound(f"runpod: pod {pod_id} does not exist")
        if pod.state_word not in done:
            raise ProviderError(
                f"runpod: cannot {action} pod {pod_id} while it is {pod.state_word or 'unknown'}"
            )

    def stop_pod(self, pod_id: str) -> None:
        self._action(pod_id, "stop", _STOPPED)

    def start_pod(self, pod_id: str) -> None:
        self._action(pod_id, "start", _STARTED)

    def delete_pod(self, pod_id: str) -> bool:
        """Terminate the pod; False if RunPod did not know it. A 409 here means the pod is a
        member of an Instant Cluster, which the pod endpoints never terminate (the document's
        409 for this path), not a lack of capacity."""
        try:
            resp = self.rest.request("DELETE", f"/pods/{check_id(pod_id)}", allow=(409,))
        except (ResourceNotFound, NotFound):
            return False
        if resp.status_code == 409:
            raise ProviderError(
                f"runpod: pod {pod_id} belongs to an Instant Cluster: RunPod terminates it only "
                "with its cluster (DELETE /v2/clusters/{id}), never through the pod endpoints",
                fields={"provider": PROVIDER, "status": 409},
            )
        return True

    def pod_log(self, pod_id: str, *, tail: int, seconds: float) -> list[str]:
        """The last ``tail`` lines of the pod's container log, from the log stream read for
        about ``seconds`` (:mod:`.podlog`). A pod that has logged nothing yet has none (a 404
        from the stream is asked about); a pod RunPod no longer knows is NotFound: it keeps
        a pod's log only while the pod exists."""
        path = f"/pods/{check_id(pod_id)}/logs"
        try:
            return read_pod_log(
                self.rest, path, tail=tail, seconds=seconds, secrets=[self._key], clock=self._clock
            )
        except ResourceNotFound:
            if self.get_pod(pod_id) is not None:
                return []
        raise NotFound(
            f"runpod: pod {pod_id} does not exist (any more): RunPod keeps a pod's log only "
            "while the pod exists"
        )

    # --- Instant Clusters (REST v2) ---------------------------------------------------------

    def create_cluster(self, body: dict[str, Any]) -> Cluster:
        """``POST /v2/clusters`` (201 with the ``Cluster``). Failures read as a pod create's
        (:func:`_create_error`): the document gives this path the same 400, 403 and 422."""
        try:
            answer = self.rest.post_json("/clusters", json=body)
        except ProviderError as exc:
            raise _create_error(exc) from None
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError("runpod: POST /clusters answered without a cluster id")
        return Cluster.model_validate(answer)

    def list_clusters(self, name: str | None = None) -> list[Cluster]:
        """The account's clusters (those named ``name`` only: the list has no filter)."""
        body = self.rest.get_json("/clusters")
        items = [Cluster.model_validate(c) for c in _listed(body, "clusters", "GET /clusters")]
        return [c for c in items if name is None or c.name == name]

    def cluster_pods(self, cluster_id: str) -> list[Pod] | None:
        """The cluster's member pods (``GET /v2/clusters/{id}/pods``); None: no such cluster."""
        try:
            body = self.rest.get_json(f"/clusters/{check_id(cluster_id, 'cluster')}/pods")
        except (ResourceNotFound, NotFound):
            return None
        return [Pod.model_validate(p) for p in _listed(body, "pods", "GET /clusters/{id}/pods")]

    def delete_cluster(self, cluster_id: str) -> bool:
        """Delete the cluster and every pod of it (RunPod deletes clusters whole); False if
        RunPod did not know it."""
        try:
            self.rest.request("DELETE", f"/clusters/{check_id(cluster_id, 'cluster')}")
        except (ResourceNotFound, NotFound):
            return False
        return True

    # --- private registry credentials (REST v2) ---------------------------------------------

    def registry_auths(self) -> list[dict[str, Any]]:
        """The account's registry credentials (``GET /v2/registries``: ``id`` and ``name``;
        RunPod never returns the username or password)."""
        body = self.rest.get_json("/registries")
        return _listed(body, "registries", "GET /registries")

    def create_registry_auth(self, name: str, username: str, password: str) -> str:
        """Store registry credentials with RunPod (``POST /v2/registries``); returns their id
        (a pod names it in ``registry``)."""
        body = {"name": name, "username": username, "password": password}
        answer = self.rest.post_json("/registries", json=body)
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError("runpod: POST /registries answered without an id")
        return str(answer["id"])

    # --- network volumes (REST v2) ----------------------------------------------------------

    def create_volume(self, name: str, size_gb: int, data_center: str) -> NetworkVolume:
        body = {"name": name, "size": int(size_gb), "dataCenter": data_center}
        answer = self.rest.post_json("/network-volumes", json=body)
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError("runpod: POST /network-volumes answered without a volume id")
        return NetworkVolume.model_validate(answer)

    def list_volumes(self) -> list[NetworkVolume]:
        body = self.rest.get_json("/network-volumes")
        items = _listed(body, "networkVolumes", "GET /network-volumes")
        return [NetworkVolume.model_validate(v) for v in items]

    def get_volume(self, volume_id: str) -> NetworkVolume | None:
        try:
            body = self.rest.get_json(f"/network-volumes/{check_id(volume_id, 'volume')}")
        except (ResourceNotFound, NotFound):
            return None
        ok = isinstance(body, dict) and body.get("id")
        return NetworkVolume.model_validate(body) if ok else None

    def delete_volume(self, volume_id: str) -> bool:
        """Delete a network volume; False if RunPod did not know it."""
        try:
            self.rest.request("DELETE", f"/network-volumes/{check_id(volume_id, 'volume')}")
        except (ResourceNotFound, NotFound):
            return False
        return True

    # --- the GPU catalog (REST v2) ----------------------------------------------------------

    def gpu_catalog(self, gpu_count: int, cloud: str) -> list[dict[str, Any]]:
        """GPU types with their on-demand price per GPU and, for ``gpu_count`` GPUs in
        ``cloud`` (SECURE or COMMUNITY), their stock overall and per data center."""
        params = {
            "include": "AVAILABILITY",
            "product": "POD",
            "count": str(int(gpu_count)),
            "cloud": cloud,
        }
        body = self.rest.get_json("/catalog/gpus", params=params)
        return [g for g in _listed(body, "gpus", "GET /catalog/gpus") if isinstance(g["id"], str)]

    # --- GraphQL: spot pods -----------------------------------------------------------------

    def spot_prices(self, gpu_count: int) -> list[dict[str, Any]]:
        """GPU types with their spot floor (``minimumBidPrice``) and stock per cloud."""
        data = self.gql.graphql(gql.gpu_types(gpu_count), idempotent=True)
        types = data.get("gpuTypes")
        if not isinstance(types, list):
            raise ProviderError("runpod: the gpuTypes answer has no list of GPU types")
        return [t for t in types if isinstance(t, dict) and isinstance(t.get("id"), str)]

    def rent_interruptable(self, pod_input: dict[str, Any]) -> Pod:
        try:
            data = self.gql.graphql(gql.rent_interruptable(pod_input))
        except QuotaExceeded as exc:  # GraphQL says it in words: "Insufficient balance..."
            raise (_no_balance(exc) if _BALANCE.search(exc.message) else exc) from None
        pod = data.get("podRentInterruptable")
        if not isinstance(pod, dict) or not pod.get("id"):
            raise ProviderError("runpod: podRentInterruptable answered without a pod id")
        return Pod.model_validate(pod)

    def deploy_on_demand(self, pod_input: dict[str, Any]) -> Pod:
        """An on-demand pod through GraphQL (for the host minimums REST v2 cannot ask for)."""
        try:
            data = self.gql.graphql(gql.deploy_on_demand(pod_input))
        except QuotaExceeded as exc:
            raise (_no_balance(exc) if _BALANCE.search(exc.message) else exc) from None
        pod = data.get("podFindAndDeployOnDemand")
        if not isinstance(pod, dict) or not pod.get("id"):
            raise ProviderError("runpod: podFindAndDeployOnDemand answered without a pod id")
        return Pod.model_validate(pod)

    def bid_resume(self, pod_id: str, bid_per_gpu: float, gpu_count: int) -> None:
        self.gql.graphql(gql.bid_resume(check_id(pod_id), bid_per_gpu, gpu_count))
