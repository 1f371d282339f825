"""The state behind the fake RunPod server: GPU types with prices and capacity, pods whose
"container" runs on this machine, network volumes, and spot interruptions.

A pod's container is its start command (REST v2's ``args``, or GraphQL's ``dockerArgs``, read
as RunPod documents it: :func:`container_argv`) with the image's ENTRYPOINT, run as a local
process with the pod's env plus what RunPod puts in every pod
(``RUNPOD_POD_ID``, ``RUNPOD_API_KEY``: the pod's own key, :meth:`FakeCloud.pod_key`). The container starts ``boot_delay`` seconds after the
create; until then the pod is RUNNING with no runtime. One host runs many "containers", so
each pod's first HTTP port is given a free local port, passed as ``CORRAL_AGENT_BIND`` (a real
pod has its own network namespace), and the server's proxy maps ``<pod>-<port>`` to it. Each
container has a root of its own (``<root>/<pod id>/fs``, passed as ``CORRAL_NODE_ROOT``: a real
pod has its own filesystem; where this machine allows it, the container runs in a mount
namespace of its own where that root is ``/mnt/fs``, the same path in every pod; a deleted pod's
root is deleted), and an environment of its own: nothing of the controller's. What
the container prints (stdout and stderr) is kept in ``<root>/<pod id>/container.log``, which the
server's log stream serves. An image in ``images_without_python`` has a shell and nothing
else on its PATH: the node bootstrap finds no python there, says so and exits.

Stop: SIGTERM to the container's main process, SIGKILL to all of it ``stop_grace_s`` later.
Delete: SIGKILL at once. Spot interruption: the pod becomes EXITED, SIGTERM, then SIGKILL
after the notice (RunPod: at most 5 s).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from corral.providers.common.node import NodeView

CAPACITY_MESSAGE = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
AGENT_BIND = "CORRAL_AGENT_BIND"
DATA_CENTERS = ("EU-RO-1", "US-TX-3")
NODE_ROOT = "CORRAL_NODE_ROOT"
#: an image the fake runs with a shell and no python (say, a user's image built wrong)
IMAGE_WITHOUT_PYTHON = "docker.io/library/busybox:1.36"
#: an image with an ENTRYPOINT of its own (a model server, say): what it is given as CMD
#: becomes its arguments; run, it says so and exits 3
IMAGE_WITH_ENTRYPOINT = "docker.io/vllm/vllm-openai:v0.6.0"
ENTRYPOINT_RAN = "the image's own ENTRYPOINT ran"


@dataclass
class Image:
    """What the fake knows of an image: its ENTRYPOINT and CMD (Docker's exec form)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)


def container_argv(image: Image, start: str) -> list[str]:
    """The container's process for a pod's start command ``start`` (REST v2 ``args``,
    GraphQL ``dockerArgs``), as RunPod documents it ("Container start command", docs
    ``pods/templates/manage-templates``: it overrides the image's CMD; "JSON format with
    entrypoint and cmd"):

    * empty: the image's ENTRYPOINT + CMD;
    * the JSON form ``{"entrypoint": [...], "cmd": [...]}``: a non-empty ``entrypoint``
      replaces the image's (and, as in Docker, its CMD: ``cmd`` or nothing), else the image's
      ENTRYPOINT gets ``cmd``;
    * any other string: the image's ENTRYPOINT gets it as its CMD, split at whitespace and
      nothing else. How RunPod splits a plain string is not documented; the fake takes the
      reading that honours no quoting, so a command that needs its quotes kept fails here.
    """
    if not start.strip():
        return image.entrypoint + image.cmd
    try:
        form = json.loads(start)
    except ValueError:
        form = None
    if isinstance(form, dict) and set(form) <= {"entrypoint", "cmd"}:
        entrypoint, cmd = form.get("entrypoint") or [], form.get("cmd") or []
        strings = all(isinstance(a, str) for a in [*entrypoint, *cmd])
        if isinstance(entrypoint, list) and isinstance(cmd, list) and strings:
            return (entrypoint or image.entrypoint) + cmd
    return image.entrypoint + start.split()


class CloudError(Exception):
    """An API error: ``status`` for REST (GraphQL answers 200 with ``errors``)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class GpuKind:
    id: str
    display: str
    memory_gb: int
    prices: dict[str, float | None]  # securePrice, communityPrice, secureSpotPrice, ...
    capacity: dict[str, int]  # free GPUs per cloud: SECURE, COMMUNITY
    max_count: int = 8
    #: what the hosts of this type have per GPU (GraphQL's minVcpuCount and minMemoryInGb
    #: are checked against them; REST v2 cannot ask)
    vcpu_per_gpu: int = 16
    ram_per_gpu_gb: int = 62
    #: data centers that have this GPU type (capacity is counted over all of them)
    data_centers: list[str] = field(default_factory=lambda: list(DATA_CENTERS))

    def price(self, cloud: str, spot: bool) -> float | None:
        return self.prices.get(f"{cloud.lower()}{'Spot' if spot else ''}Price")


def default_gpus() -> list[GpuKind]:
    def kind(gid, display, mem, secure, community, s_spot, c_spot, cap):
        prices = {
            "securePrice": secure,
            "communityPrice": community,
            "secureSpotPrice": s_spot,
            "communitySpotPrice": c_spot,
        }
        return GpuKind(gid, display, mem, prices, {"SECURE": cap, "COMMUNITY": cap})

    kinds = [
        kind("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34, 0.35, 0.2, 16),
        kind("NVIDIA L40S", "L40S", 48, 0.86, 0.79, 0.5, 0.4, 16),
        kind("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, 1.89, 1.39, 1.19, 0.89, 16),
        kind("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.99, None, 1.75, None, 8),
    ]
    kinds[-1].data_centers = ["US-TX-3"]
    return kinds


@dataclass
class Pod:
    id: str
    name: str
    image: str
    gpu: GpuKind
    gpu_count: int
    cloud: str
    interruptible: bool
    cost_per_hr: float
    env: dict[str, str]
    ports: list[str]
    argv: list[str]
    container_disk_gb: int = 50
    volume_in_gb: int = 0
    volume_mount_path: str = "/workspace"
    network_volume_id: str | None = None
    data_center_id: str = DATA_CENTERS[0]
    args: str = ""
    created_at: str = field(default_factory=lambda: _iso(time.time()))
    registry_auth_id: str | None = None
    bid_per_gpu: float | None = None
    desired: str = "RUNNING"
    last_status_change: str = ""
    started_at: float = 0.0
    up: bool = False
    proc: subprocess.Popen | None = None
    local_ports: dict[int, int] = field(default_factory=dict)
    machine_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    #: an Instant Cluster member's ``PodCluster`` (``id``, ``rank``, ``ip``); None: a lone pod
    cluster: dict[str, Any] | None = None
    #: what RunPod sets in the container besides the pod's env (a cluster's NODE_RANK, ...)
    runtime_env: dict[str, str] = field(default_factory=dict)

    def http_ports(self) -> list[int]:
        return [int(p.split("/")[0]) for p in self.ports if p.endswith("/http")]

    def tcp_ports(self) -> list[int]:
        return [int(p.split("/")[0]) for p in self.ports if p.endswith("/tcp")]

    def running(self) -> bool:
        return self.up and self.proc is not None and self.proc.poll() is None

    def status(self) -> str:
        """REST v2's status: PROVISIONING until the container runs, RUNNING, EXITED."""
        if self.desired != "RUNNING":
            return self.desired
        return "RUNNING" if self.up else "PROVISIONING"

    def v2(self) -> dict[str, Any]:
        """The pod as REST v2 answers it (``Pod`` in the v2 OpenAPI)."""
        status = self.status()
        mounts: dict[str, Any] = {}
        if self.network_volume_id:
            mounts["network"] = [
                {"volumeId": self.network_volume_id, "path": self.volume_mount_path}
            ]
        elif self.volume_in_gb:
            mounts["persistent"] = {"size": self.volume_in_gb, "path": self.volume_mount_path}
        return {
            "id": self.id,
            "name": self.name,
            "status": status,
            "actions": list(ACTIONS.get(status, ())),
            "image": self.image,
            "args": self.args,
            "disk": self.container_disk_gb,
            "mounts": mounts,
            "ports": list(self.ports),
            "env": dict(self.env),
            "registry": None,
            "gpu": {"id": self.gpu.id, "count": self.gpu_count},
            "cloud": self.cloud,
            "dataCenterId": self.data_center_id,
            "cudaVersion": "12.8",
            "ssh": {"proxy": self.v2_ssh_proxy(), "direct": None},  # no 22/tcp in ports
            "template": None,
            "cost": self.cost_per_hr if status == "RUNNING" else 0.0,
            "locked": False,
            "runtime": self.v2_runtime() if status == "RUNNING" else None,
            "createdAt": self.created_at,
            "startedAt": _iso(self.started_at) if self.started_at else None,
            "globalNetworking": {"enabled": False},
            **({"cluster": dict(self.cluster)} if self.cluster is not None else {}),
        }

    def v2_ssh_proxy(self) -> dict[str, Any]:
        """SSH through RunPod's proxy (``PodSshEndpoint``): the pod has a machine from its
        create on."""
        user = f"{self.id}-{self.machine_id[:8]}"
        return {
            "host": "ssh.runpod.io",
            "port": 22,
            "username": user,
            "command": f"ssh {user}@ssh.runpod.io",
        }

    def v2_runtime(self) -> dict[str, Any]:
        ports = [
            {"private": p, "public": lp, "type": "http", "ip": "127.0.0.1"}
            for p, lp in self.local_ports.items()
        ]
        return {"uptime": int(time.time() - self.started_at), "ports": ports}

    def runtime(self) -> dict[str, Any] | None:
        if not self.running():
            return None
        ports = [
            {
                "ip": "127.0.0.1",
                "isIpPublic": False,
                "privatePort": p,
                "publicPort": lp,
                "type": "http",
            }
            for p, lp in self.local_ports.items()
        ]
        return {"uptimeInSeconds": int(time.time() - self.started_at), "ports": ports}


#: the actions REST v2 allows in each status
ACTIONS = {
    "RUNNING": ("stop", "restart", "terminate"),
    "EXITED": ("start", "terminate"),
    "ERROR": ("start", "terminate"),
    "PROVISIONING": ("stop", "terminate"),
    "STARTING": ("stop", "terminate"),
}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(proc: subprocess.Popen | None) -> list[psutil.Process]:
    """The container's processes: its main process and every descendant, while it runs."""
    if proc is None or proc.poll() is not None:
        return []
    try:
        root = psutil.Process(proc.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal(procs: list[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)  # psutil checks the process is still the same one
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


class FakeCloud:
    def __init__(
        self,
        root: Path,
        api_key: str,
        *,
        gpus: list[GpuKind] | None = None,
        boot_delay: float = 0.2,
        stop_grace_s: float = 5.0,
        python: str = sys.executable,
    ):
        self.root = Path(root)
        self.api_key = api_key
        self.gpus = {g.id: g for g in (gpus or default_gpus())}
        self.boot_delay = boot_delay
        self.stop_grace_s = stop_grace_s
        self.python = python
        self.pods: dict[str, Pod] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        #: private registry credentials (id -> {id, name, username, password})
        self.registry_auths: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        #: Instant Clusters (id -> :class:`~.fake_clusters.FakeCluster`)
        self.clusters: dict[str, Any] = {}
        #: whether spot (interruptible) pods are sold: False is RunPod without them
        self.spot_sold = True
        #: images whose containers have a shell but no python (nothing else on their PATH)
        self.images_without_python: set[str] = {IMAGE_WITHOUT_PYTHON}
        #: images with an ENTRYPOINT or CMD (any other: neither)
        self.images: dict[str, Image] = {
            IMAGE_WITH_ENTRYPOINT: Image(
                entrypoint=[python, "-c", f"print({ENTRYPOINT_RAN!r}); raise SystemExit(3)"]
            )
        }
        self.lock = threading.RLock()
        self._timers: list[threading.Timer] = []
        #: processes of stopped or interrupted containers, until their SIGKILL
        self._doomed: list[list[psutil.Process]] = []

    # --- capacity ---------------------------------------------------------------------------

    def free(self, gpu: GpuKind, cloud: str) -> int:
        held = sum(
            p.gpu_count
            for p in self.pods.values()
            if p.gpu is gpu and p.cloud == cloud and p.desired == "RUNNING"
        )
        return gpu.capacity.get(cloud, 0) - held

    def stock(self, gpu: GpuKind, cloud: str, count: int) -> str | None:
        free = self.free(gpu, cloud)
        if free >= 4 * count:
            return "High"
        if free >= 2 * count:
            return "Medium"
        return "Low" if free >= count else None

    # --- pods -------------------------------------------------------------------------------

    def create(
        self,
        *,
        name: str,
        image: str,
        gpu_ids: list[str],
        count: int,
        cloud: str,
        interruptible: bool,
        env: dict[str, str],
        ports: list[str],
        argv: list[str],
        bid: float | None = None,
        data_centers: list[str] | None = None,
        **extra: Any,
    ) -> Pod:
        min_vcpu = int(extra.pop("min_vcpu", None) or 0)
        min_memory = int(extra.pop("min_memory_gb", None) or 0)
        with self.lock:
            kinds = [self.gpus[g] for g in gpu_ids if g in self.gpus]
            if not kinds:
                raise CloudError(400, f"unknown GPU type(s): {gpu_ids}")
            # a host with fewer vCPUs or less memory than asked is no host for the pod
            kinds = [
                k
                for k in kinds
                if k.vcpu_per_gpu * count >= min_vcpu and k.ram_per_gpu_gb * count >= min_memory
            ]
            if not kinds:
                raise CloudError(400, CAPACITY_MESSAGE)
            if cloud not in ("SECURE", "COMMUNITY"):
                raise CloudError(400, f"invalid cloudType {cloud!r}")
            gpu = next((k for k in kinds if self.free(k, cloud) >= count), None)
            if gpu is None:
                raise CloudError(400, CAPACITY_MESSAGE)
            places = [dc for dc in (data_centers or gpu.data_centers) if dc in gpu.data_centers]
            volume_id = extra.get("network_volume_id")
            if volume_id:
                dc = self.volume(volume_id)["dataCenter"]
                if data_centers and dc not in data_centers:
                    raise CloudError(400, f"network volume {volume_id} is in {dc}")
                places = [dc] if dc in gpu.data_centers else []
            if not places:
                raise CloudError(400, CAPACITY_MESSAGE)
            extra["data_center_id"] = places[0]
            auth = extra.get("registry_auth_id")
            if auth is not None and auth not in self.registry_auths:
                raise CloudError(400, f"container registry auth {auth} not found")
            per_gpu = gpu.price(cloud, interruptible)
            if per_gpu is None:
                raise CloudError(400, f"{gpu.id} is not sold that way in the {cloud} cloud")
            if interruptible and bid is not None:
                if bid < per_gpu:
                    raise CloudError(400, f"bid {bid} is below the minimum bid {per_gpu}")
                per_gpu = bid
            pod = Pod(
                id=uuid.uuid4().hex[:14],
                name=name,
                image=image,
                gpu=gpu,
                gpu_count=count,
                cloud=cloud,
                interruptible=interruptible,
                cost_per_hr=round(per_gpu * count, 4),
                env=dict(env),
                ports=list(ports),
                argv=list(argv),
                bid_per_gpu=bid,
                **extra,
            )
            self.pods[pod.id] = pod
            self._schedule(self.boot_delay, self._boot, pod.id)
            return pod

    def pod_key(self, pod_id: str) -> str:
        """The pod-scoped key of ``pod_id``, what RunPod puts in the pod's ``RUNPOD_API_KEY``
        ("every Pod comes preinstalled with runpodctl and a Pod-scoped API key", docs
        runpodctl/overview). What it may do is not documented; the fake server lets it read
        and delete its own pod and nothing else (403)."""
        return f"rpa_POD{pod_id}{self.api_key[-12:]}"

    def argv(self, image: str, start: str) -> list[str]:
        """The process a pod of ``image`` runs for the start command ``start``."""
        return container_argv(self.images.get(image, Image()), start)

    def get(self, pod_id: str) -> Pod:
        with self.lock:
            pod = self.pods.get(pod_id)
            if pod is None:
                raise CloudError(404, f"pod {pod_id} not found")
            return pod

    def _schedule(self, delay: float, fn: Any, *args: Any) -> None:
        timer = threading.Timer(delay, fn, args)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _boot(self, pod_id: str) -> None:
        with self.lock:
            pod = self.pods.get(pod_id)
            if pod is None or pod.desired != "RUNNING" or pod.proc is not None:
                return
            if pod.cluster is not None and pod.cluster.get("rank") is None:
                # a cluster's pod starts once RunPod has placed it (its rank and address)
                self._schedule(self.boot_delay, self._boot, pod.id)
                return
            home = self.root / pod.id
            home.mkdir(parents=True, exist_ok=True)
            fs = home / "fs"  # the container's own "/": nothing of the controller's is there
            fs.mkdir(exist_ok=True)
            self._mount(pod, fs)
            node = NodeView(home)  # at /mnt in a mount namespace of its own, where possible
            env = {
                "PATH": os.path.dirname(self.python) + os.pathsep + os.environ.get("PATH", ""),
                "HOME": node.path(home),
                "LANG": "C.UTF-8",
                # the "image" has this interpreter's corral (a checkout's through PYTHONPATH)
                **(
                    {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
                ),
                **pod.env,
                **pod.runtime_env,
                "RUNPOD_POD_ID": pod.id,
                "RUNPOD_API_KEY": self.pod_key(pod.id),  # the pod's own, not the account's
                "RUNPOD_GPU_COUNT": str(pod.gpu_count),
                NODE_ROOT: node.root,
            }
            if os.environ.get("PYTHONPATH"):  # the corral under test, not an installed one
                env["PYTHONPATH"] = os.environ["PYTHONPATH"]
            pod.local_ports = {p: _free_port() for p in pod.http_ports()[:1]}
            for lp in pod.local_ports.values():
                env[AGENT_BIND] = f"127.0.0.1:{lp}"
            argv = list(pod.argv)
            if argv and pod.image in self.images_without_python:
                bare = home / "bin"  # a shell and nothing else on its PATH
                bare.mkdir(exist_ok=True)
                env["PATH"] = node.path(bare)
                argv[0] = shutil.which(argv[0]) or argv[0]
            if argv:
                with open(self.log_path(pod.id), "ab") as out:
                    pod.proc = subprocess.Popen(
                        node.argv(argv),
                        env=env,
                        cwd=home,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                threading.Thread(target=pod.proc.wait, daemon=True).start()
            pod.up = True
            pod.started_at = time.time()

    def log_path(self, pod_id: str) -> Path:
        """What the pod's container printed (stdout and stderr), from its first start on;
        absent until it first starts."""
        return self.root / pod_id / "container.log"

    def volume_dir(self, volume_id: str) -> Path:
        """Where a network volume's files are (they outlive every pod)."""
        return self.root / "network-volumes" / volume_id

    def _mount(self, pod: Pod, fs: Path) -> None:
        """Mount the pod's network volume at its path: inside the container's own root ``fs``
        (what the node's corral sees under ``CORRAL_NODE_ROOT``) and, for a path in the
        test's temporary directory, at that path itself (what a job's absolute paths reach:
        the "container" is a process of this machine). A path anywhere else (``/data``) is
        never touched on this machine."""
        if not pod.network_volume_id:
            return
        target = self.volume_dir(pod.network_volume_id)
        target.mkdir(parents=True, exist_ok=True)
        mounts = [fs / pod.volume_mount_path.lstrip("/")]
        if Path(pod.volume_mount_path).is_relative_to(self.root.parent):
            mounts.append(Path(pod.volume_mount_path))
        for mount in mounts:
            if mount.is_symlink():
                mount.unlink()
            elif mount.exists():
                continue  # a real directory of this machine: left as it is
            mount.parent.mkdir(parents=True, exist_ok=True)
            mount.symlink_to(target, target_is_directory=True)

    def _halt(self, pod: Pod, grace: float | None) -> None:
        """SIGTERM now and SIGKILL after ``grace`` (None: SIGKILL now)."""
        procs = _tree(pod.proc)
        pod.proc, pod.up = None, False
        if grace is None:
            _signal(procs, signal.SIGKILL)
            return
        _signal(procs[:1], signal.SIGTERM)  # like docker stop: the main process only
        self._doomed.append(procs)
        self._schedule(grace, self._kill, procs)

    def _kill(self, procs: list[psutil.Process]) -> None:
        _signal(procs, signal.SIGKILL)
        with self.lock:
            if procs in self._doomed:
                self._doomed.remove(procs)

    def stop(self, pod_id: str, *, reason: str = "Stopped by user") -> Pod:
        with self.lock:
            pod = self.get(pod_id)
            if pod.desired == "RUNNING":
                pod.desired = "EXITED"
                pod.last_status_change = f"{reason}: {time.ctime()}"
                self._halt(pod, self.stop_grace_s)
            return pod

    def interrupt(self, pod_id: str, notice: float = 5.0) -> Pod:
        """RunPod reclaims a spot pod: EXITED, SIGTERM, SIGKILL after ``notice``."""
        with self.lock:
            pod = self.get(pod_id)
            if not pod.interruptible:
                raise ValueError(f"pod {pod_id} is not a spot pod")
            if pod.desired == "RUNNING":
                pod.desired = "EXITED"
                pod.last_status_change = f"Interrupted by RunPod: {time.ctime()}"
                self._halt(pod, notice)
            return pod

    def start(self, pod_id: str, bid: float | None = None) -> Pod:
        with self.lock:
            pod = self.get(pod_id)
            if pod.desired == "RUNNING":
                return pod
            if self.free(pod.gpu, pod.cloud) < pod.gpu_count:
                raise CloudError(400, "There are not enough free GPUs on the host machine")
            if pod.interruptible and bid is not None:
                pod.bid_per_gpu = bid
                pod.cost_per_hr = round(bid * pod.gpu_count, 4)
            pod.desired = "RUNNING"
            pod.last_status_change = f"Resumed by user: {time.ctime()}"
            self._schedule(self.boot_delay, self._boot, pod.id)
            return pod

    def delete(self, pod_id: str) -> None:
        with self.lock:
            pod = self.pods.pop(pod_id, None)
            if pod is None:
                raise CloudError(400, "pod not found to terminate")
            self.deleted.append(pod_id)
            self._halt(pod, None)
            NodeView(self.root / pod.id).erase()  # the pod's disk is gone; its volume stays

    def list(self, name: str | None = None) -> list[Pod]:
        with self.lock:
            return [p for p in self.pods.values() if name is None or p.name == name]

    # --- network volumes --------------------------------------------------------------------

    def create_registry_auth(self, body: dict[str, Any]) -> dict[str, Any]:
        if not all(
            isinstance(body.get(k), str) and body[k] for k in ("name", "username", "password")
        ):
            raise CloudError(400, "name, username and password are required")
        auth = {
            "id": uuid.uuid4().hex[:10],
            **{k: body[k] for k in ("name", "username", "password")},
        }
        with self.lock:
            self.registry_auths[auth["id"]] = auth
        return {"id": auth["id"], "name": auth["name"]}

    def create_volume(
        self, name: str, size: int, data_center: str, kind: str = "STANDARD"
    ) -> dict[str, Any]:
        """A network volume, as REST v2 shows it (``NetworkVolume``)."""
        vol = {
            "id": uuid.uuid4().hex[:10],
            "name": name,
            "size": size,
            "dataCenter": data_center,
            "type": kind,
        }
        with self.lock:
            self.volumes[vol["id"]] = vol
        return dict(vol)

    def volume(self, volume_id: str) -> dict[str, Any]:
        with self.lock:
            if volume_id not in self.volumes:
                raise CloudError(404, f"network volume {volume_id} not found")
            return dict(self.volumes[volume_id])

    def delete_volume(self, volume_id: str) -> None:
        with self.lock:
            self.volume(volume_id)
            users = sorted(p.id for p in self.pods.values() if p.network_volume_id == volume_id)
            if users:  # UNCONFIRMED: how RunPod refuses this; a 400 with a detail is assumed
                raise CloudError(
                    400, f"network volume {volume_id} is attached to pod(s) {', '.join(users)}"
                )
            del self.volumes[volume_id]
        shutil.rmtree(self.volume_dir(volume_id), ignore_errors=True)

    # --- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every container; cancel every timer."""
        with self.lock:
            for pod in self.pods.values():
                self._halt(pod, None)
            for timer in self._timers:
                timer.cancel()
            doomed, self._doomed = self._doomed, []
        for procs in doomed:  # kills that were still pending
            _signal(procs, signal.SIGKILL)
