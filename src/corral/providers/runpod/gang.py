"""RunPod's gangs (a multi-node job, ``docs/multinode.md``): one Instant Cluster per gang
attempt (``POST /v2/clusters``, ``type: TRAINING``, ``compute.podCount`` = the gang's nodes),
in one data center, its pods on the cluster's private overlay network. A mixin of
:class:`~corral.providers.runpod.provider.RunPodProvider`.

* **The head's launch** (rank 0) creates the cluster for every node, named for the head's key
  (``corral-<key>``): a retry or a restarted controller finds it by that name, as a lone pod
  is found by its own. The cluster's pods share one template, so no pod is told its rank in
  its env: each takes it from what RunPod sets on every cluster pod (``NODE_RANK``,
  ``PRIMARY_ADDR``), mapped to the agent's ``CORRAL_GANG_*`` by its start command
  (:func:`~corral.providers.runpod.bootstrap.cluster_script`).
* **Node k's launch** (key ``<head key>-k<k>``) finds the head's cluster and returns its pod of
  rank ``k`` (``PodCluster.rank``), with its own agent endpoint. No cluster: the node is
  refused (its head is not there); a pod not placed yet: :class:`MaybeLaunched`, so the same
  key is looked up again, until ``place_timeout_s`` after the create: then the cluster is
  deleted and the launch has no capacity (a head never placed would otherwise keep its
  attempt provisioning, billed).
* **The head's address** is its pod's ``PodCluster.ip``; every node meets it on
  ``gang_port`` (a setting, 29500: RunPod opens every port between a cluster's pods).
* **The end**: RunPod deletes clusters whole (``DELETE /v2/clusters/{id}``; a member pod
  refuses the pod endpoints), so terminating any node deletes the cluster; the other nodes'
  terminate then finds it gone. Survivors are never kept (``keeps_members`` False): a lost
  node relaunches the whole cluster.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

from corral.errors import (
    BadInput,
    MaybeLaunched,
    NoCapacity,
    NotYetTerminated,
    ProviderError,
)
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    Offer,
    SupportsGangs,
)
from corral.providers.common.create import create_or_adopt
from corral.providers.runpod import bootstrap as boot
from corral.providers.runpod.pods import Cluster, Pod, pod_state

if TYPE_CHECKING:
    from corral.providers.runpod.api import RunPodAPI
    from corral.providers.runpod.settings import RunPodSettings
    from corral.providers.runpod.volumes import NamedVolumes

log = logging.getLogger("corral.providers.runpod")

#: looks for a cluster's pod of a rank just after its create (RunPod assigns ranks and
#: addresses while it provisions), a second apart
POD_LOOKS = 3
#: a member's key: ``<head key>-k<rank>`` (control.gangs.member_key)
_MEMBER = re.compile(r"^(?P<head>.+)-k(?P<rank>[1-9][0-9]*)$")
#: the data of a cluster node's Instance
CLUSTER_ID = "cluster_id"
CLUSTER_RANK = "cluster_rank"
CLUSTER_IP = "cluster_ip"


def head_key_of(key: str, rank: int) -> str:
    """The head's key of node ``rank`` whose key is ``key``; BadInput when it is not a
    member's key."""
    if rank == 0:
        return key
    m = _MEMBER.match(key)
    if m is None or int(m.group("rank")) != rank:
        raise BadInput(f"runpod: key {key!r} is not node {rank}'s key of a gang (<head>-k{rank})")
    return m.group("head")


def _pod_for(pods: list[Pod], rank: int) -> Pod | None:
    """The pod of ``rank``; for the head (0), any pod while none is ranked yet: a handle on a
    cluster RunPod has not placed, whose terminate deletes it whole (never left behind)."""
    pod = next((p for p in pods if p.cluster_rank == rank), None)
    if pod is None and rank == 0 and all(p.cluster_rank is None for p in pods):
        pod = pods[0] if pods else None
    return pod


class RunPodGangs(SupportsGangs):
    """Needs from the class it is mixed into: ``api``, ``settings``, ``named``, ``_sleep``,
    ``_endpoint`` and ``_instance``."""

    #: an Instant Cluster holds 2 to 250 pods (ClusterCompute.podCount)
    max_nodes: ClassVar[int] = 250
    gang_form: ClassVar[str] = (
        "an Instant Cluster: identical pods in one data center on a private overlay network"
    )
    launches_gangs: ClassVar[bool] = True

    api: RunPodAPI
    settings: RunPodSettings
    named: NamedVolumes
    _sleep: Callable[[float], None]
    _now: Callable[[], float]
    _endpoint: Callable[[str], str]
    _instance: Callable[..., Instance]

    def gang_port(self, run_id: str) -> int:
        """The settings' port (29500): RunPod opens every port between a cluster's pods."""
        return self.settings.gang_port

    def gang_address(self, head: Instance) -> str:
        """The head pod's address on its cluster's network (``PodCluster.ip``); "" while it
        has none (the controller waits to launch the other nodes)."""
        address = head.data.get(CLUSTER_IP)
        if not address and head.data.get(CLUSTER_ID):
            pods = self.api.cluster_pods(str(head.data[CLUSTER_ID])) or []
            address = next((p.cluster_ip for p in pods if p.id == head.instance_id), None)
        return str(address or "")

    # --- launch -------------------------------------------------------------------------------

    def _launch_node(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        """Node ``bootstrap.gang.rank`` of a gang: the head creates (or finds) the cluster,
        every node returns its pod of its rank."""
        assert bootstrap.gang is not None
        rank, nodes = bootstrap.gang.rank, bootstrap.plan.nodes
        head_key = head_key_of(key, rank)
        if not 2 <= nodes <= self.max_nodes:
            raise BadInput(f"runpod: an Instant Cluster has 2..{self.max_nodes} pods, not {nodes}")
        if rank >= nodes:
            raise BadInput(f"runpod: node {rank} of a gang of {nodes}")
        if offer.spot:
            raise NoCapacity("runpod: an Instant Cluster has on-demand pods only (no spot)")
        image = bootstrap.image
        if image is not None and image.username:
            raise BadInput(
                "image_auth: RunPod's Instant Clusters cannot pull a private image (a cluster "
                "create takes no registry credentials)"
            )
        name = boot.pod_name(head_key)
        cluster = self._cluster_named(name)
        if cluster is None and rank > 0:
            raise ProviderError(
                f"runpod: no Instant Cluster {name}: node {rank} joins its head's cluster, "
                "which is not there"
            )
        if cluster is None:
            cluster = self._create_cluster(offer, bootstrap, head_key, nodes, image)
        if cluster.pod_count != nodes:
            raise ProviderError(
                f"runpod: Instant Cluster {cluster.id} has {cluster.pod_count} pods, "
                f"the gang {nodes}"
            )
        pod = self._pod_of_rank(cluster, rank)
        return self._node_instance(pod, key, cluster, offer)

    def _create_cluster(
        self, offer: Offer, bootstrap: Bootstrap, head_key: str, nodes: int, image: object
    ) -> Cluster:
        env = boot.cluster_env(bootstrap, offer, head_key, self.settings)
        mount = self.named.ensure(offer)
        name = boot.pod_name(head_key)
        body = boot.cluster_body(
            offer,
            env,
            head_key,
            nodes,
            self.settings,
            mount=mount,
            image=bootstrap.image.name if bootstrap.image else None,
        )

        def create() -> Cluster:
            cluster = self.api.create_cluster(body)
            log.info("runpod: created Instant Cluster %s (%d pods) for %s", cluster.id, nodes, name)
            return cluster

        def adopt() -> Cluster | None:
            try:
                return self._cluster_named(name)
            except ProviderError as exc:
                log.warning("runpod: cannot look for cluster %s: %s", name, exc)
                return None

        # a timeout or a 5xx: the cluster may exist
        return create_or_adopt(
            f"Instant Cluster {name}",
            provider="runpod",
            key=head_key,
            attempts=self.settings.create_attempts,
            sleep=self._sleep,
            create=create,
            adopt=adopt,
        )

    def _cluster_named(self, name: str) -> Cluster | None:
        clusters = self.api.list_clusters(name=name)
        return min(clusters, key=lambda c: c.id) if clusters else None

    def _pod_of_rank(self, cluster: Cluster, rank: int) -> Pod:
        """The cluster's pod of ``rank`` with its address; :class:`MaybeLaunched` while
        RunPod has not placed it (the key is looked up again)."""
        for i in range(POD_LOOKS):
            pods = self.api.cluster_pods(cluster.id)
            if pods is None:
                raise ProviderError(f"runpod: Instant Cluster {cluster.id} is gone")
            pod = next((p for p in pods if p.cluster_rank == rank and p.cluster_ip), None)
            if pod is not None:
                return pod
            if i + 1 < POD_LOOKS:
                self._sleep(1.0)
        age = self._cluster_age(cluster)
        if age is not None and age > self.settings.place_timeout_s:
            # RunPod has not placed it for too long: given up whole, never left billing
            self.api.delete_cluster(cluster.id)
            raise NoCapacity(
                f"runpod: Instant Cluster {cluster.id} had no pod of rank {rank} with an "
                f"address {age:.0f}s after its create (CORRAL_RUNPOD_PLACE_TIMEOUT_S: "
                f"{self.settings.place_timeout_s:.0f}s); deleted it"
            )
        raise MaybeLaunched(
            f"runpod: Instant Cluster {cluster.id} has no pod of rank {rank} with an address "
            "yet (looked up again)",
            fields={"provider": "runpod"},
        )

    def _cluster_age(self, cluster: Cluster) -> float | None:
        """Seconds since the cluster's create (its ``createdAt``), if RunPod says."""
        try:
            created = datetime.fromisoformat(cluster.created_at)
        except ValueError:
            return None
        if created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        return self._now() - created.timestamp()

    def _node_instance(
        self, pod: Pod, key: str, cluster: Cluster, offer: Offer | None = None
    ) -> Instance:
        inst = self._instance(pod, key, offer)
        data = {
            **inst.data,
            CLUSTER_ID: cluster.id,
            CLUSTER_RANK: pod.cluster_rank,
            CLUSTER_IP: pod.cluster_ip,
            "data_center_id": cluster.data_center_id or inst.data.get("data_center_id"),
        }
        return inst.model_copy(update={"data": data})

    # --- status, terminate, find --------------------------------------------------------------

    def _cluster_pod(self, instance: Instance) -> tuple[bool, Pod | None]:
        """(whether the cluster exists, the instance's pod in it)."""
        pods = self.api.cluster_pods(str(instance.data[CLUSTER_ID]))
        if pods is None:
            return False, None
        return True, next((p for p in pods if p.id == instance.instance_id), None)

    def _node_status(self, instance: Instance) -> InstanceStatus:
        exists, pod = self._cluster_pod(instance)
        if pod is None:
            why = "its pod is gone" if exists else "its Instant Cluster was deleted"
            return InstanceStatus(state=InstanceState.TERMINATED, detail=why)
        state, detail = pod_state(pod, spot=False)
        shows = state in (InstanceState.PROVISIONING, InstanceState.RUNNING)
        return InstanceStatus(
            state=state, detail=detail, endpoint=self._endpoint(pod.id) if shows else None
        )

    def _terminate_node(self, instance: Instance) -> None:
        """Delete the node's whole cluster (RunPod deletes clusters whole); a cluster already
        gone is success."""
        cluster_id = str(instance.data[CLUSTER_ID])
        if self.api.delete_cluster(cluster_id):
            log.info("runpod: deleted Instant Cluster %s (%s)", cluster_id, instance.key)
        _, pod = self._cluster_pod(instance)
        if pod is not None and pod.state_word != "TERMINATED":
            raise NotYetTerminated(f"runpod: Instant Cluster {cluster_id} is still being deleted")

    def _find_node(self, key: str) -> Instance | None:
        """The cluster pod of ``key`` (a head's key or ``<head key>-k<rank>``), if any."""
        m = _MEMBER.match(key)
        wanted = [(key, 0)] + ([(m.group("head"), int(m.group("rank")))] if m else [])
        for head_key, rank in wanted:
            cluster = self._cluster_named(boot.pod_name(head_key))
            if cluster is None:
                continue
            pod = _pod_for(self.api.cluster_pods(cluster.id) or [], rank)
            if pod is not None:
                return self._node_instance(pod, key, cluster)
        return None

    def _cluster_instances(self) -> list[Instance]:
        """Every pod of corral's clusters (named ``corral-<head key>``), for the leak sweep."""
        out = []
        for cluster in self.api.list_clusters():
            head_key = boot.key_of(cluster.name)
            if head_key is None:
                continue
            pods = [
                p for p in self.api.cluster_pods(cluster.id) or [] if p.state_word != "TERMINATED"
            ]
            ranks = sorted({p.cluster_rank or 0 for p in pods} | ({0} if pods else set()))
            for rank in ranks:
                pod = _pod_for(pods, rank)
                if pod is not None:
                    key = head_key if rank == 0 else f"{head_key}-k{rank}"
                    out.append(self._node_instance(pod, key, cluster))
        return out
