"""RunPod's REST v2 as the fake server answers it (``api-reference-v2/openapi.json``).

Pods: ``GET/POST /pods``, ``GET/DELETE /pods/{id}``, ``POST /pods/{id}/action``; network
volumes: ``GET/POST /network-volumes``, ``GET/PATCH/DELETE /network-volumes/{id}``; private
registry credentials: ``GET/POST /registries``, ``GET /registries/{id}``; the GPU catalog:
``GET /catalog/gpus``; a pod's log, ``GET /pods/{id}/logs`` (:meth:`RestV2.open_log` answers
the request; :mod:`.fake_logs` streams it). Bodies are checked against the schema the way v2 does: an
unknown field, a missing required one or a bad type is 422 with one line per violation in
``errors``; a body that fits the schema but breaks a cross-field rule, or a GPU and data
center that cannot be placed, is 400. Every error is a problem document
(``{"title", "status", "detail"}``, ``application/problem+json``).

Every answer carries ``RateLimit-Policy`` and ``RateLimit`` (remaining requests and seconds to
the reset of the minute window); past ``quota_per_minute`` requests in a minute it is 429 with
``Retry-After``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from .fake_cloud import ACTIONS, CloudError, FakeCloud
from .fake_clusters import Clusters

PROBLEM = "application/problem+json"
V1_RETIRED = (
    "REST v1 was retired on 2026-11-15; use REST v2 at https://api.runpod.io/v2 "
    "(https://docs.runpod.io/api-reference-v2/migrate-from-v1)"
)
_CREATE_POD_FIELDS = {
    "name": str,
    "image": str,
    "args": str,
    "disk": int,
    "ports": list,
    "env": dict,
    "registry": (str, type(None)),
    "cloud": str,
    "gpu": dict,
    "cpu": dict,
    "dataCenterIds": list,
    "globalNetworking": bool,
    "mounts": dict,
    "startJupyter": bool,
    "startSsh": bool,
    "templateId": str,
}
_GPU_FIELDS = {"id": str, "count": int, "allowedCudaVersions": list, "minCudaVersion": str}
_VOLUME_FIELDS = {"name": str, "size": int, "dataCenter": str, "type": str}


def problem(status: int, detail: str, errors: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"title": HTTPStatus(status).phrase, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return body


class Invalid(Exception):
    """A body that breaks the schema: 422 with ``errors``."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def _schema(body: Any, fields: dict[str, Any], where: str = "$") -> list[str]:
    if not isinstance(body, dict):
        return [f"{where}: expected object"]
    errors = [f"{where}: additional properties '{k}' not allowed" for k in body if k not in fields]
    for key, kind in fields.items():
        if key in body:
            value = body[key]
            bad = isinstance(value, bool) and kind is int
            if bad or not isinstance(value, kind):
                errors.append(f"{where}.{key}: wrong type")
    return errors


class RestV2:
    def __init__(
        self,
        cloud: FakeCloud,
        creates: list[dict[str, Any]],
        *,
        quota_per_minute: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cloud = cloud
        self.creates = creates
        self.quota_per_minute = quota_per_minute
        self._clock = clock
        self._window = (clock(), 0)
        self._lock = threading.Lock()
        self.log_404_before_start = True
        #: Instant Clusters (``/v2/clusters``)
        self.clusters = Clusters(cloud)

    # --- rate limit ---------------------------------------------------------------------------

    def _count(self) -> tuple[int, dict[str, str]]:
        """This request's place in the minute window: (remaining, headers)."""
        with self._lock:
            start, used = self._window
            now = self._clock()
            if now - start >= 60:
                start, used = now, 0
            used += 1
            self._window = (start, used)
        remaining = max(0, self.quota_per_minute - used)
        reset = max(1, int(60 - (now - start)))
        headers = {
            "RateLimit-Policy": f'"minute";q={self.quota_per_minute};w=60',
            "RateLimit": f'"minute";r={remaining};t={reset}',
        }
        if used > self.quota_per_minute:
            headers["Retry-After"] = str(reset)
            return -1, headers
        return remaining, headers

    # --- dispatch -----------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], raw: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, body, headers) for ``method path`` (``path`` without ``/v2``)."""
        remaining, headers = self._count()
        if remaining < 0:
            return 429, problem(429, "rate limit exceeded for the minute window"), headers
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return 400, problem(400, "request body is not valid JSON"), headers
        try:
            status, answer = self._route(method, path.strip("/").split("/"), query, body)
        except Invalid as exc:
            status, answer = 422, problem(422, "request validation failed", exc.errors)
        except CloudError as exc:
            status, answer = exc.status, problem(exc.status, exc.message)
        return status, answer, headers

    def open_log(self, pod_id: str) -> tuple[int, Any, dict[str, str], Path | None]:
        """``GET /pods/{id}/logs``: (status, error body, headers, the container's log file to
        stream on a 200). An unknown pod is 404; a pod whose container has not started yet
        is 404 too while ``log_404_before_start`` (UNCONFIRMED: RunPod may instead open a
        stream with nothing in it yet, which is what the fake does otherwise)."""
        remaining, headers = self._count()
        if remaining < 0:
            return 429, problem(429, "rate limit exceeded for the minute window"), headers, None
        with self.cloud.lock:
            known = pod_id in self.cloud.pods
        if not known:
            return 404, problem(404, "pod not found"), headers, None
        path = self.cloud.log_path(pod_id)
        if not path.exists() and self.log_404_before_start:
            return 404, problem(404, f"no logs for pod {pod_id} yet"), headers, None
        return 200, None, headers, path

    def _route(
        self, method: str, parts: list[str], query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        cloud = self.cloud
        if parts[0] == "pods":
            if len(parts) == 1 and method == "GET":
                members = query.get("includeClusterPods") == ["true"]
                pods = [p for p in cloud.list() if members or p.cluster is None]
                return 200, {"pods": [p.v2() for p in pods]}
            if len(parts) == 1 and method == "POST":
                self.creates.append(body)
                return 201, self._create_pod(body).v2()
            if len(parts) == 2 and method == "GET":
                return 200, self._pod(parts[1]).v2()
            if len(parts) >= 2 and method in ("DELETE", "POST") and self.clusters.member(parts[1]):
                raise CloudError(409, "a cluster member pod is managed through its cluster")
            if len(parts) == 2 and method == "DELETE":
                self._pod(parts[1])
                cloud.delete(parts[1])
                return 204, None
            if len(parts) == 3 and parts[2] == "action" and method == "POST":
                return self._action(parts[1], body)
        if parts[0] == "clusters":
            return self.clusters.route(method, parts, body)
        if parts[0] == "network-volumes":
            if len(parts) == 1 and method == "GET":
                return 200, {"networkVolumes": [dict(v) for v in cloud.volumes.values()]}
            if len(parts) == 1 and method == "POST":
                return 201, self._create_volume(body)
            if len(parts) == 2 and method == "GET":
                return 200, cloud.volume(parts[1])
            if len(parts) == 2 and method == "PATCH":
                return 200, self._update_volume(parts[1], body)
            if len(parts) == 2 and method == "DELETE":
                cloud.delete_volume(parts[1])
                return 204, None
        if parts[0] == "registries" and len(parts) == 1:
            if method == "POST":
                return 201, cloud.create_registry_auth(body)
            if method == "GET":
                auths = cloud.registry_auths.values()
                return 200, {"registries": [{"id": a["id"], "name": a["name"]} for a in auths]}
        if parts[0] == "registries" and len(parts) == 2 and method == "GET":
            auth = cloud.registry_auths.get(parts[1])
            if auth is None:
                raise CloudError(404, "container registry credential not found")
            return 200, {"id": auth["id"], "name": auth["name"]}
        if parts[:2] == ["catalog", "gpus"] and len(parts) == 2 and method == "GET":
            return 200, {"gpus": self._catalog(query)}
        raise CloudError(404, f"no route {method} /v2/{'/'.join(parts)}")

    # --- pods ---------------------------------------------------------------------------------

    def _pod(self, pod_id: str) -> Any:
        with self.cloud.lock:
            pod = self.cloud.pods.get(pod_id)
        if pod is None:
            raise CloudError(404, "pod not found")
        return pod

    def _create_pod(self, body: Any) -> Any:
        errors = _schema(body, _CREATE_POD_FIELDS)
        if isinstance(body, dict):
            if not body.get("name"):
                errors.append("$: missing property 'name'")
            if isinstance(body.get("gpu"), dict):
                errors += _schema(body["gpu"], _GPU_FIELDS, "$.gpu")
            if body.get("cloud", "SECURE") not in ("SECURE", "COMMUNITY"):
                errors.append("$.cloud: value must be one of 'SECURE', 'COMMUNITY'")
        if errors:
            raise Invalid(errors)
        if ("gpu" in body) == ("cpu" in body):
            raise CloudError(400, "exactly one of gpu or cpu is required")
        if "cpu" in body:
            raise CloudError(400, "the fake sells GPU pods only")
        if not body.get("image") and not body.get("templateId"):
            raise CloudError(400, "image is required unless templateId is set")
        mounts = body.get("mounts") or {}
        network = mounts.get("network") or []
        if mounts.get("persistent") and network:
            raise CloudError(400, "mounts.persistent and mounts.network are mutually exclusive")
        if len(network) > 1:
            raise Invalid(["$.mounts.network: maximum 1 items"])
        gpu = body["gpu"]
        if not isinstance(gpu.get("id"), str):
            raise Invalid(["$.gpu: missing property 'id'"])
        volume = network[0] if network else None
        persistent = mounts.get("persistent") or {}
        pod = self.cloud.create(
            name=body["name"],
            image=str(body.get("image") or ""),
            gpu_ids=[gpu["id"]],
            count=int(gpu.get("count") or 1),
            cloud=str(body.get("cloud") or "SECURE"),
            interruptible=False,
            env=dict(body.get("env") or {}),
            ports=list(body.get("ports") or []),
            argv=self.cloud.argv(str(body.get("image") or ""), str(body.get("args") or "")),
            container_disk_gb=int(body.get("disk") or 50),
            volume_in_gb=int(persistent.get("size") or 0),
            volume_mount_path=str((volume or persistent).get("path") or "/workspace"),
            network_volume_id=volume["volumeId"] if volume else None,
            data_centers=list(body.get("dataCenterIds") or []) or None,
            args=str(body.get("args") or ""),
            registry_auth_id=body.get("registry"),
        )
        return pod

    def _action(self, pod_id: str, body: Any) -> tuple[int, Any]:
        errors = _schema(body, {"action": str})
        if not errors and body.get("action") not in ("start", "stop", "restart", "terminate"):
            errors.append("$.action: value must be one of 'start', 'stop', 'restart', 'terminate'")
        if errors or not isinstance(body, dict) or "action" not in body:
            raise Invalid(errors or ["$: missing property 'action'"])
        action = body["action"]
        pod = self._pod(pod_id)
        status = pod.status()
        if action not in ACTIONS.get(status, ()):
            raise CloudError(409, f"action '{action}' is not valid for a pod in status {status}")
        if action == "terminate":
            self.cloud.delete(pod_id)
            return 204, None
        if action == "stop":
            pod = self.cloud.stop(pod_id)
        elif action == "start":
            pod = self.cloud.start(pod_id)
        else:  # restart
            pod = self.cloud.stop(pod_id, reason="Restarted by user")
            pod = self.cloud.start(pod_id)
        return 200, pod.v2()

    # --- network volumes ----------------------------------------------------------------------

    def _create_volume(self, body: Any) -> dict[str, Any]:
        errors = _schema(body, _VOLUME_FIELDS)
        if isinstance(body, dict):
            errors += [
                f"$: missing property '{k}'"
                for k in ("name", "size", "dataCenter")
                if k not in body
            ]
            size = body.get("size")
            if isinstance(size, int) and not 10 <= size <= 4096:
                errors.append("$.size: must be between 10 and 4096")
            if body.get("type", "STANDARD") not in ("STANDARD", "HIGH_PERFORMANCE"):
                errors.append("$.type: value must be one of 'STANDARD', 'HIGH_PERFORMANCE'")
        if errors:
            raise Invalid(errors)
        known = {dc for g in self.cloud.gpus.values() for dc in g.data_centers}
        if body["dataCenter"] not in known:
            raise CloudError(400, f"unknown data center {body['dataCenter']!r}")
        return self.cloud.create_volume(
            body["name"], body["size"], body["dataCenter"], body.get("type", "STANDARD")
        )

    def _update_volume(self, volume_id: str, body: Any) -> dict[str, Any]:
        errors = _schema(body, {"name": str, "size": int})
        if errors:
            raise Invalid(errors)
        with self.cloud.lock:
            vol = self.cloud.volumes.get(volume_id)
            if vol is None:
                raise CloudError(404, "network volume not found")
            if "size" in body and body["size"] < vol["size"]:
                raise CloudError(400, "a network volume can only grow")
            vol.update({k: body[k] for k in ("name", "size") if k in body})
            return dict(vol)

    # --- the GPU catalog ----------------------------------------------------------------------

    def _catalog(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        include = (query.get("include") or [""])[0]
        product = (query.get("product") or [""])[0]
        if bool(include) != bool(product):
            raise CloudError(400, "include=AVAILABILITY and product go together")
        if include and include != "AVAILABILITY":
            raise Invalid([f"include: unknown value {include!r}"])
        for name in ("count", "cloud"):
            if name in query and not include:
                raise CloudError(400, f"{name} is valid only with include=AVAILABILITY")
        count = int((query.get("count") or ["1"])[0])
        cloud_type = (query.get("cloud") or ["SECURE"])[0]
        if cloud_type not in ("SECURE", "COMMUNITY"):
            raise Invalid(
                [f"cloud: value must be one of 'SECURE', 'COMMUNITY', not {cloud_type!r}"]
            )
        out = []
        with self.cloud.lock:
            for g in self.cloud.gpus.values():
                secure, community = g.prices["securePrice"], g.prices["communityPrice"]
                item: dict[str, Any] = {
                    "id": g.id,
                    "name": g.display,
                    "pool": None,
                    "manufacturer": "NVIDIA",
                    "memory": g.memory_gb,
                    "secure": secure is not None,
                    "community": community is not None,
                    "price": {"secure": secure or 0.0, "community": community or 0.0},
                    "maxCount": {
                        "secure": g.max_count if secure is not None else 0,
                        "community": g.max_count if community is not None else 0,
                    },
                }
                if include:
                    sold = g.price(cloud_type, False) is not None
                    stock = self.cloud.stock(g, cloud_type, count) if sold else None
                    item["availability"] = (stock or "NONE").upper()
                    if stock:
                        item["dataCenters"] = [
                            {"id": dc, "name": dc, "availability": stock.upper()}
                            for dc in g.data_centers
                        ]
                out.append(item)
        return out
