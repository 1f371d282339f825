"""RunPod's Instant Clusters as the fake server answers them (REST v2 ``/v2/clusters``: list,
create; ``/v2/clusters/{id}``: get, rename, delete; ``/v2/clusters/{id}/pods``: the member
pods). The published document checks every request and answer (``fake_server``); what it
does not settle is assumed as ``docs/providers.md`` ("Assumptions", RunPod) says.

A cluster is ``podCount`` pods of the fake cloud (:class:`~.fake_cloud.Pod`), each running
the cluster's one start command like any pod, created in one data center of the GPU type
with room for every pod (else 400 with RunPod's capacity message, nothing created). Each
member has its ``PodCluster`` (``id``, ``rank``, ``ip``) and, in its container only (never in
the pod's ``env``), the variables RunPod documents for every pod of an Instant Cluster (docs
``instant-clusters/configuration``): ``NODE_RANK``, ``NODE_ADDR``, ``PRIMARY_ADDR`` /
``MASTER_ADDR``, ``PRIMARY_PORT`` / ``MASTER_PORT``, ``NUM_NODES``, ``NUM_TRAINERS``,
``HOST_NODE_ADDR``, ``WORLD_SIZE``. Every pod runs on this machine, so a cluster's private
network is loopback: cluster ``n``'s pod of rank ``r`` is ``127.0.n.(r + 2)`` (Linux routes
all of 127/8 to loopback). ``place_ranks`` False leaves new members unranked and without an
address (``rank`` null, no ``ip``: RunPod assigns them while it provisions), their
containers not started, until :meth:`Clusters.place`.

A member pod refuses the pod endpoints' changes (``DELETE /v2/pods/{id}`` and actions: 409,
the document's word for a cluster member) and is left out of ``GET /v2/pods`` unless
``includeClusterPods=true``; ``DELETE /v2/clusters/{id}`` kills and deletes every member.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .fake_cloud import CAPACITY_MESSAGE, CloudError, FakeCloud

#: the primary's port RunPod announces (PRIMARY_PORT): "All ports are available"
PRIMARY_PORT = 29400


@dataclass
class FakeCluster:
    id: str
    name: str
    type: str
    compute: dict[str, int | str]
    data_center_id: str
    seq: int
    pod_ids: list[str] = field(default_factory=list)
    created_at: str = field(
        default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    )

    def ip(self, rank: int) -> str:
        return f"127.0.{self.seq}.{rank + 2}"


class Clusters:
    def __init__(self, cloud: FakeCloud):
        self.cloud = cloud
        #: bodies of cluster creates, in order
        self.creates: list[dict[str, Any]] = []
        #: ids of deleted clusters, in order
        self.deleted: list[str] = []
        #: whether members get their rank and address at the create (else: :meth:`place`)
        self.place_ranks = True
        self._seq = 0

    # --- REST ---------------------------------------------------------------------------------

    def route(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        if len(parts) == 1 and method == "GET":
            with self.cloud.lock:
                return 200, {"clusters": [self.v2(c) for c in self.cloud.clusters.values()]}
        if len(parts) == 1 and method == "POST":
            self.creates.append(body)
            return 201, self.v2(self.create(body))
        if len(parts) == 2 and method == "GET":
            return 200, self.v2(self.get(parts[1]))
        if len(parts) == 2 and method == "PATCH":
            cluster = self.get(parts[1])
            cluster.name = str(body["name"])
            return 200, self.v2(cluster)
        if len(parts) == 2 and method == "DELETE":
            self.delete(parts[1])
            return 204, None
        if len(parts) == 3 and parts[2] == "pods" and method == "GET":
            cluster = self.get(parts[1])
            with self.cloud.lock:
                pods = [self.cloud.pods[p] for p in cluster.pod_ids if p in self.cloud.pods]
                return 200, {"pods": [p.v2() for p in pods]}
        raise CloudError(404, f"no route {method} /v2/{'/'.join(parts)}")

    def get(self, cluster_id: str) -> FakeCluster:
        with self.cloud.lock:
            cluster = self.cloud.clusters.get(cluster_id)
        if cluster is None:
            raise CloudError(404, "cluster not found")
        return cluster

    def v2(self, c: FakeCluster) -> dict[str, Any]:
        """The cluster as REST v2 answers it (``Cluster``)."""
        with self.cloud.lock:
            pods = [self.cloud.pods[p] for p in c.pod_ids if p in self.cloud.pods]
            by_status = Counter(p.status() for p in pods)
            out: dict[str, Any] = {
                "id": c.id,
                "name": c.name,
                "type": c.type,
                "compute": dict(c.compute),
                "dataCenterId": c.data_center_id,
                "pods": {"total": len(pods), "byStatus": dict(by_status)},
                "network": {"cidr": f"127.0.{c.seq}.0/24"},
                "createdAt": c.created_at,
            }
            primary = next((p for p in pods if (p.cluster or {}).get("rank") == 0), None)
            if primary is not None:
                out["primary"] = {"podId": primary.id, "status": primary.status()}
            return out

    # --- the cloud ----------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> FakeCluster:
        """``podCount`` pods of ``gpuCountPerPod`` GPUs of one type in one data center, or a
        400 and nothing (no room for every pod there)."""
        cloud = self.cloud
        compute = body["compute"]
        count, per_pod = int(compute["podCount"]), int(compute["gpuCountPerPod"])
        with cloud.lock:
            gpu = cloud.gpus.get(str(compute["gpuTypeId"]))
            if gpu is None:
                raise CloudError(400, f"unknown GPU type {compute['gpuTypeId']!r}")
            if per_pod > gpu.max_count:
                raise CloudError(400, f"gpuCountPerPod {per_pod} is over {gpu.max_count}")
            if cloud.free(gpu, "SECURE") < count * per_pod:
                raise CloudError(400, CAPACITY_MESSAGE)
            wanted = list(body.get("dataCenterIds") or []) or gpu.data_centers
            places = [dc for dc in wanted if dc in gpu.data_centers]
            network = (body.get("mounts") or {}).get("network") or []
            volume = network[0] if network else None
            if volume:
                dc = cloud.volume(volume["volumeId"])["dataCenter"]
                places = [dc] if dc in places else []
            if not places:
                raise CloudError(400, CAPACITY_MESSAGE)
            self._seq = self._seq % 250 + 1
            cluster = FakeCluster(
                id="cl" + uuid.uuid4().hex[:12],
                name=str(body["name"]),
                type=str(body["type"]),
                compute=dict(compute),
                data_center_id=places[0],
                seq=self._seq,
            )
            image, args = str(body.get("image") or ""), str(body.get("args") or "")
            for rank in range(count):
                pod = cloud.create(
                    name=f"{cluster.name}-node-{rank}",
                    image=image,
                    gpu_ids=[gpu.id],
                    count=per_pod,
                    cloud="SECURE",
                    interruptible=False,
                    env=dict(body.get("env") or {}),
                    ports=list(body.get("ports") or []),
                    argv=cloud.argv(image, args),
                    data_centers=[cluster.data_center_id],
                    container_disk_gb=int(body.get("disk") or 50),
                    volume_mount_path=str((volume or {}).get("path") or "/workspace"),
                    network_volume_id=volume["volumeId"] if volume else None,
                    args=args,
                )
                pod.cluster = {"id": cluster.id, "rank": None}
                cluster.pod_ids.append(pod.id)
            cloud.clusters[cluster.id] = cluster
            if self.place_ranks:
                self.place(cluster.id)
            return cluster

    def place(self, cluster_id: str, ranks: set[int] | None = None) -> None:
        """Give the members of ``ranks`` (None: every member) their rank, address and
        RunPod's cluster variables; a member's container starts only once it has them."""
        cloud = self.cloud
        with cloud.lock:
            c = cloud.clusters[cluster_id]
            count, per_pod = int(c.compute["podCount"]), int(c.compute["gpuCountPerPod"])
            for rank, pod_id in enumerate(c.pod_ids):
                if ranks is not None and rank not in ranks:
                    continue
                pod = cloud.pods[pod_id]
                pod.cluster = {"id": c.id, "rank": rank, "ip": c.ip(rank)}
                pod.runtime_env = {
                    "NODE_RANK": str(rank),
                    "NODE_ADDR": c.ip(rank),
                    "PRIMARY_ADDR": c.ip(0),
                    "MASTER_ADDR": c.ip(0),
                    "PRIMARY_PORT": str(PRIMARY_PORT),
                    "MASTER_PORT": str(PRIMARY_PORT),
                    "NUM_NODES": str(count),
                    "NUM_TRAINERS": str(per_pod),
                    "HOST_NODE_ADDR": f"{c.ip(0)}:{PRIMARY_PORT}",
                    "WORLD_SIZE": str(count * per_pod),
                }

    def delete(self, cluster_id: str) -> None:
        """Delete the cluster and every member (their containers killed at once)."""
        cloud = self.cloud
        with cloud.lock:
            cluster = cloud.clusters.pop(cluster_id, None)
            if cluster is None:
                raise CloudError(404, "cluster not found")
            for pod_id in cluster.pod_ids:
                if pod_id in cloud.pods:
                    cloud.delete(pod_id)
            self.deleted.append(cluster_id)

    def member(self, pod_id: str) -> bool:
        with self.cloud.lock:
            pod = self.cloud.pods.get(pod_id)
            return pod is not None and pod.cluster is not None
