"""The state behind the fake SaladCloud: GPU classes, container groups whose one replica is a
container run on this machine (:mod:`support.containers`), interruptions, system logs and the
per-container metadata service.

A group's replica goes ``allocating`` -> ``downloading`` -> ``creating`` -> ``running``,
``step`` seconds apart; on ``running`` its command starts in a root directory of its own, on
a new ``machine_id``. An interruption (:meth:`FakeSaladCloud.interrupt`, or the instance's
``reallocate`` action) kills the container at once - SaladCloud gives no notice - and puts the
replica back to ``allocating`` on another machine, where the same container starts again
from scratch, as SaladCloud does. ``stop`` sends SIGTERM and SIGKILL ``stop_grace_s`` later.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support.containers import Container

ORG = "acme"
PROJECT = "training"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def default_classes() -> list[dict[str, Any]]:
    def cls(cid, name, count, prices, high_demand=False, kind="community"):
        return {
            "id": cid,
            "name": name,
            "gpu_class_type": kind,
            "gpu_count": count,
            "is_high_demand": high_demand,
            "min_vcpu": 1,
            "max_vcpu": 16 * count,
            "min_ram": 1024,
            "max_ram": 61440 * count,
            "min_storage": 1073741824,
            "max_storage": 268435456000 * count,
            "prices": [{"priority": p, "price": v} for p, v in prices.items()],
        }

    return [
        cls(
            "ed563892-aacd-40f5-80b7-90c9be6c759b",
            "RTX 3090 (24 GB)",
            1,
            {"high": "0.250", "medium": "0.200", "low": "0.150", "batch": "0.100"},
        ),
        cls(
            "a5db5c50-cbcb-4596-ae80-6a0c8090d80f",
            "RTX 4090 (24 GB)",
            1,
            {"high": "0.350", "medium": "0.300", "low": "0.250", "batch": "0.180"},
            high_demand=True,
        ),
        cls(
            "f1380143-2aa5-4e3b-9b5c-6d5b1b5d7a11",
            "L40S (48 GB) x8",
            8,
            {"high": "6.400", "medium": "5.600", "low": "4.800", "batch": "4.000"},
            kind="secure",
        ),
    ]


@dataclass
class Replica:
    id: str
    machine_id: str
    state: str = "allocating"
    update_time: str = field(default_factory=now_iso)
    container: Container | None = None
    ready: bool = False
    generation: int = 0

    def api(self, version: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "machine_id": self.machine_id,
            "state": self.state,
            "update_time": self.update_time,
            "version": version,
            "ready": self.ready,
            "started": self.state == "running",
            "pulling_progress": 100 if self.state in ("creating", "running") else 40,
            "deletion_cost": 0,
        }


@dataclass
class Group:
    id: str
    name: str
    body: dict[str, Any]
    status: str = "pending"
    create_time: str = field(default_factory=now_iso)
    replica: Replica | None = None
    logs: list[dict[str, Any]] = field(default_factory=list)
    deletion_costs: list[int] = field(default_factory=list)
    version: int = 1
    machines: list[str] = field(default_factory=list)
    #: every container the group ran, in order (their logs outlive them)
    containers: list[Container] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        state = self.replica.state if self.replica else None
        return {
            "allocating_count": int(state in ("allocating", "downloading")),
            "creating_count": int(state == "creating"),
            "running_count": int(state == "running"),
            "stopping_count": int(state == "stopping"),
        }

    @property
    def dns(self) -> str:
        """The gateway's host name (a name under the reserved ``.test``, as the document's
        pattern requires a host name; the fake's gateway serves it at ``/gw/<dns>``)."""
        return f"{self.name}.salad.test"

    def api(self) -> dict[str, Any]:
        """The group as SaladCloud answers it: every field its document requires, ``priority``
        at the top level (the answer's ``container`` has none), no registry credentials."""
        body = self.body
        container = {
            k: v
            for k, v in body["container"].items()
            if k not in ("registry_authentication", "priority")
        }
        container.setdefault("command", None)
        resources = dict(container.get("resources") or {})
        resources.setdefault("gpu_classes", [])
        container["resources"] = resources
        out = {
            "id": self.id,
            "name": self.name,
            "display_name": body.get("display_name") or self.name,
            "organization_name": ORG,
            "project_name": PROJECT,
            "container": container,
            "autostart_policy": body["autostart_policy"],
            "restart_policy": body["restart_policy"],
            "replicas": body["replicas"],
            # UNCONFIRMED upstream: a group created without a priority (a CPU one) is answered
            # at the lowest; the document's enum has no null for an answer to carry
            "priority": body["container"].get("priority") or "batch",
            "country_codes": body.get("country_codes") or [],
            "current_state": {
                "status": self.status,
                "description": None,
                "start_time": self.create_time,
                "finish_time": self.create_time,
                "instance_status_counts": self.counts(),
            },
            "pending_change": False,
            "version": self.version,
            "create_time": self.create_time,
            "update_time": now_iso(),
            "scheduled-scaling-enabled": bool(body.get("scheduled-scaling-enabled")),
            "scaling-actions": list(body.get("scaling-actions") or []),
        }
        for probe in ("startup_probe", "liveness_probe", "readiness_probe"):
            out[probe] = body.get(probe)
        if body.get("networking"):
            out["networking"] = {
                "load_balancer": "round_robin",
                **body["networking"],
                "dns": self.dns,
            }
        return out

    def system_logs(self) -> list[dict[str, Any]]:
        """The last events in SaladCloud's SystemLog shape (the resources the group asked for;
        a value outside the document's range is null)."""
        resources = self.body["container"].get("resources") or {}

        def within(value: Any, low: int, high: int) -> int | None:
            return value if isinstance(value, int) and low <= value <= high else None

        common = {
            "resource_cpu": within(resources.get("cpu"), 1, 16),
            "resource_gpu_class": ",".join(resources.get("gpu_classes") or []),
            "resource_memory": within(resources.get("memory"), 1024, 61440),
            "resource_storage_amount": within(
                resources.get("storage_amount"), 1073741824, 268435456000
            ),
        }
        return [{**log, **common} for log in self.logs]


class CloudError(Exception):
    def __init__(self, status: int, title: str, detail: str = ""):
        super().__init__(detail or title)
        self.status, self.title, self.detail = status, title, detail


class FakeSaladCloud:
    def __init__(
        self,
        root: Path,
        *,
        classes: list[dict[str, Any]] | None = None,
        step: float = 0.1,
        stop_grace_s: float = 3.0,
    ):
        self.root = Path(root)
        self.classes = classes or default_classes()
        self.step = step
        self.stop_grace_s = stop_grace_s
        self.groups: dict[str, Group] = {}
        self.deleted: list[str] = []
        self.lock = threading.RLock()
        self.extra_env: dict[str, str] = {}  # the server adds its IMDS URL per group
        #: a command run instead of the group's (an image that lacks what the command needs)
        self.command_override: list[str] | None = None
        self._timers: list[threading.Timer] = []
        self._closed = False

    # --- groups -----------------------------------------------------------------------------

    def create(self, body: dict[str, Any], imds: str) -> Group:
        with self.lock:
            name = body["name"]
            if name in self.groups:
                raise CloudError(409, "Conflict", f"container group {name} already exists")
            group = Group(id=str(uuid.uuid4()), name=name, body=body)
            self.groups[name] = group
            self.extra_env[name] = imds
            self._later(self.step, self._prepared, name)
            return group

    def get(self, name: str) -> Group:
        with self.lock:
            group = self.groups.get(name)
            if group is None:
                raise CloudError(404, "Not Found", "The container group could not be found.")
            return group

    def _later(self, delay: float, fn: Any, *args: Any) -> None:
        if self._closed:
            return
        timer = threading.Timer(delay, fn, args)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _prepared(self, name: str) -> None:
        with self.lock:
            group = self.groups.get(name)
            if group is None or group.status != "pending":
                return
            if group.body["autostart_policy"]:
                self._deploy(group)
            else:
                group.status = "stopped"

    def _deploy(self, group: Group) -> None:
        group.status = "deploying"
        self._allocate(group)

    def _allocate(self, group: Group) -> None:
        generation = (group.replica.generation + 1) if group.replica else 1
        group.replica = Replica(
            id=str(uuid.uuid4()), machine_id=str(uuid.uuid4()), generation=generation
        )
        self._log(group, "Instance Allocated")
        self._later(self.step, self._advance, group.name, generation, "downloading")

    def _advance(self, name: str, generation: int, state: str) -> None:
        with self.lock:
            group = self.groups.get(name)
            replica = group.replica if group else None
            if group is None or replica is None or replica.generation != generation:
                return
            if group.status not in ("deploying", "running"):
                return
            replica.state, replica.update_time = state, now_iso()
            if state == "downloading":
                self._later(self.step, self._advance, name, generation, "creating")
            elif state == "creating":
                self._later(self.step, self._advance, name, generation, "running")
            elif state == "running":
                self._run(group, replica)

    def _run(self, group: Group, replica: Replica) -> None:
        container = group.body["container"]
        env = {
            **(container.get("environment_variables") or {}),
            "SALAD_ORGANIZATION_NAME": ORG,
            "SALAD_PROJECT_NAME": PROJECT,
            "SALAD_CONTAINER_GROUP_NAME": group.name,
            "SALAD_CONTAINER_GROUP_ID": group.id,
            "SALAD_INSTANCE_ID": replica.id,
            "SALAD_MACHINE_ID": replica.machine_id,
            "CORRAL_SALAD_IMDS_URL": self.extra_env.get(group.name, ""),
        }
        gpu_ids = (container.get("resources") or {}).get("gpu_classes") or []
        gpu = next((c for c in self.classes if c["id"] in gpu_ids), None)
        if gpu is not None:  # the node's GPUs, as corral's agent detects them here
            model = gpu["name"].split(" (")[0].replace(" ", "")
            env["CORRAL_FAKE_GPUS"] = f"{model}:{gpu.get('gpu_count') or 1}"
        root = self.root / group.name / replica.machine_id
        argv = self.command_override or list(container.get("command") or ["true"])
        replica.container = Container(argv, env, root)
        replica.container.start()
        group.containers.append(replica.container)
        group.status = "running"
        group.machines.append(replica.machine_id)
        self._log(group, "Instance Running")
        threading.Thread(target=self._watch_exit, args=(group.name, replica), daemon=True).start()

    def _watch_exit(self, name: str, replica: Replica) -> None:
        container = replica.container
        if container is None or container.proc is None:
            return
        code = container.proc.wait()
        with self.lock:
            group = self.groups.get(name)
            if group is None or group.replica is not replica or replica.state != "running":
                return
            self._log(
                group, f"Instance Exited:{code} ({'Exited Successfully' if code == 0 else 'Error'})"
            )
            policy = group.body["restart_policy"]
            if policy == "always" or (policy == "on_failure" and code != 0):
                replica.container.start()  # the same container, restarted on the same node
            else:
                group.replica = None  # UNCONFIRMED upstream: the replica is gone

    def _log(self, group: Group, event: str) -> None:
        replica = group.replica
        log: dict[str, Any] = {
            "event_name": event,
            "event_time": now_iso(),
            "version": str(group.version),  # a string in SaladCloud's SystemLog
        }
        if replica is not None:
            log.update(instance_id=replica.id, machine_id=replica.machine_id)
        group.logs.append(log)
        del group.logs[:-50]

    def interrupt(self, name: str, why: str = "Instance Interrupted (Node Offline)") -> None:
        """The replica's node goes away: no notice, the container dies, a new node is
        allocated and the same container starts again there."""
        with self.lock:
            group = self.get(name)
            replica = group.replica
            if replica is not None and replica.container is not None:
                replica.container.kill()
            self._log(group, why)
            if group.status in ("deploying", "running"):
                self._allocate(group)

    def start(self, name: str) -> None:
        with self.lock:
            group = self.get(name)
            if group.status == "stopped":
                self._deploy(group)
            elif group.status == "pending":
                group.body["autostart_policy"] = True

    def stop(self, name: str) -> None:
        with self.lock:
            group = self.get(name)
            replica = group.replica
            group.status = "stopped"
            if replica is not None:
                if replica.container is not None and replica.container.running():
                    replica.container.stop(self.stop_grace_s)
                group.replica = None

    def delete(self, name: str) -> None:
        with self.lock:
            group = self.get(name)
            replica = group.replica
            if replica is not None and replica.container is not None:
                replica.container.kill()
            del self.groups[name]
            self.deleted.append(name)

    def by_dns(self, dns: str) -> str:
        """The name of the group whose gateway is ``dns`` ("" if none)."""
        with self.lock:
            return next((g.name for g in self.groups.values() if g.dns == dns), "")

    def replica_port(self, name: str) -> int | None:
        with self.lock:
            group = self.groups.get(name)
            replica = group.replica if group else None
            if replica is None or replica.state != "running" or replica.container is None:
                return None
            return replica.container.port if replica.container.running() else None

    def close(self) -> None:
        with self.lock:
            self._closed = True
            for timer in self._timers:
                timer.cancel()
            for group in self.groups.values():
                if group.replica is not None and group.replica.container is not None:
                    group.replica.container.kill()
