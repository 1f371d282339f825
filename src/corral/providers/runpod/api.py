"""RunPod's API: REST v1 for pods and network volumes, GraphQL for spot pods and prices.

Both go through :class:`~corral.providers.http.ProviderHTTP` (User-Agent, retries honouring
``Retry-After``, a shared request rate, typed errors, no key in any message) on one injected
:class:`httpx.Client`. Creates are never retried here on a timeout or a 5xx: RunPod has been
seen to answer 500 after creating the pod, so the provider looks the pod up by name first.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Any

import httpx

from corral.errors import NotFound, ProviderError
from corral.providers.http import ProviderHTTP, ResourceNotFound, RetryPolicy, TokenBucket
from corral.providers.runpod import graphql as gql
from corral.providers.runpod.pods import Pod
from corral.providers.runpod.settings import RunPodSettings

PROVIDER = "runpod"
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_id(value: str, what: str = "pod") -> str:
    """An id safe to put in a URL path or a GraphQL string; anything else is NotFound."""
    if not isinstance(value, str) or not _ID.match(value):
        raise NotFound(f"runpod: {value!r} is not a {what} id")
    return value


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
        bucket = None
        if settings.rate_per_s is not None:
            burst = max(1.0, settings.rate_per_s * 2)
            bucket = TokenBucket(settings.rate_per_s, burst, clock=clock, sleep=sleep)
        common: dict[str, Any] = dict(
            client=self._client,
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

    # --- pods (REST) ------------------------------------------------------------------------

    def list_pods(self, name: str | None = None) -> list[Pod]:
        """Pods of the account (those named ``name`` only, when given: the filter is applied
        here too, in case the API matches names loosely)."""
        params = {"name": name} if name is not None else None
        body = self.rest.get_json("/pods", params=params)
        if isinstance(body, dict):  # REST v2 wraps the list
            body = body.get("pods")
        if not isinstance(body, list):
            raise ProviderError("runpod: GET /pods did not answer with a list of pods")
        pods = [Pod.model_validate(p) for p in body if isinstance(p, dict) and p.get("id")]
        return [p for p in pods if name is None or p.name == name]

    def get_pod(self, pod_id: str) -> Pod | None:
        """The pod, or None if RunPod does not know it (any more)."""
        try:
            body = self.rest.get_json(f"/pods/{check_id(pod_id)}")
        except (ResourceNotFound, NotFound):
            return None
        return Pod.model_validate(body) if isinstance(body, dict) and body.get("id") else None

    def create_pod(self, body: dict[str, Any]) -> Pod:
        answer = self.rest.post_json("/pods", json=body)
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError("runpod: POST /pods answered without a pod id")
        return Pod.model_validate(answer)

    def stop_pod(self, pod_id: str) -> None:
        self.rest.request("POST", f"/pods/{check_id(pod_id)}/stop", idempotent=True)

    def start_pod(self, pod_id: str) -> None:
        self.rest.request("POST", f"/pods/{check_id(pod_id)}/start", idempotent=True)

    def delete_pod(self, pod_id: str) -> bool:
        """Terminate the pod; False if RunPod did not know it."""
        try:
            self.rest.request("DELETE", f"/pods/{check_id(pod_id)}")
        except (ResourceNotFound, NotFound):
            return False
        return True

    # --- network volumes (REST) -------------------------------------------------------------

    def create_volume(self, name: str, size_gb: int, data_center_id: str) -> dict[str, Any]:
        body = {"name": name, "size": int(size_gb), "dataCenterId": data_center_id}
        answer = self.rest.post_json("/networkvolumes", json=body)
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError("runpod: POST /networkvolumes answered without a volume id")
        return answer

    def list_volumes(self) -> list[dict[str, Any]]:
        body = self.rest.get_json("/networkvolumes")
        if isinstance(body, dict):
            body = body.get("networkVolumes") or body.get("volumes")
        return [v for v in body or [] if isinstance(v, dict) and v.get("id")]

    def get_volume(self, volume_id: str) -> dict[str, Any] | None:
        try:
            body = self.rest.get_json(f"/networkvolumes/{check_id(volume_id, 'volume')}")
        except (ResourceNotFound, NotFound):
            return None
        return body if isinstance(body, dict) and body.get("id") else None

    def delete_volume(self, volume_id: str) -> bool:
        try:
            self.rest.request("DELETE", f"/networkvolumes/{check_id(volume_id, 'volume')}")
        except (ResourceNotFound, NotFound):
            return False
        return True

    # --- GraphQL ----------------------------------------------------------------------------

    def gpu_types(self, gpu_count: int) -> list[dict[str, Any]]:
        data = self.gql.graphql(gql.gpu_types(gpu_count), idempotent=True)
        types = data.get("gpuTypes")
        if not isinstance(types, list):
            raise ProviderError("runpod: the gpuTypes answer has no list of GPU types")
        return [t for t in types if isinstance(t, dict) and isinstance(t.get("id"), str)]

    def rent_interruptable(self, pod_input: dict[str, Any]) -> Pod:
        data = self.gql.graphql(gql.rent_interruptable(pod_input))
        pod = data.get("podRentInterruptable")
        if not isinstance(pod, dict) or not pod.get("id"):
            raise ProviderError("runpod: podRentInterruptable answered without a pod id")
        return Pod.model_validate({"interruptible": True, **pod})

    def bid_resume(self, pod_id: str, bid_per_gpu: float, gpu_count: int) -> None:
        self.gql.graphql(gql.bid_resume(check_id(pod_id), bid_per_gpu, gpu_count))

    def pod_runtime(self, pod_id: str) -> Pod | None:
        """The pod as GraphQL sees it, with ``runtime``; None for an unknown pod (RunPod may
        answer null or an error for one)."""
        try:
            data = self.gql.graphql(gql.pod_runtime(check_id(pod_id)), idempotent=True)
        except (ResourceNotFound, NotFound):
            return None
        pod = data.get("pod")
        return Pod.model_validate(pod) if isinstance(pod, dict) and pod.get("id") else None
