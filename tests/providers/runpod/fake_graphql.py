"""The fake RunPod GraphQL endpoint: a small parser for the documents clients send (inline
literals or ``$variables``), and resolvers for the fields of the contract: ``gpuTypes`` (with
``lowestPrice`` per alias), ``pod``, ``myself``, ``podRentInterruptable``,
``podFindAndDeployOnDemand``, ``podStop``, ``podResume``, ``podBidResume``, ``podTerminate``.
Answers always go out with HTTP 200, as ``{"data": ...}`` or ``{"errors": [...]}``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .fake_cloud import CloudError, FakeCloud, Pod

_OPERATION = re.compile(r"^\s*(?:(query|mutation)\b\s*(\w+)?\s*(\([^)]*\))?)?\s*\{\s*(\w+)", re.S)
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_ALIASED = re.compile(r"(\w+)\s*:\s*lowestPrice\s*\(")
_QUERIES = {"gpuTypes", "myself", "pod"}
#: what the fake answers a spot create once ``cloud.spot_sold`` is False (RunPod's own words
#: for this are UNCONFIRMED: spot pods left its docs in May 2026)
SPOT_GONE = "Interruptible pods are not available for this account"


class GraphQLError(Exception):
    pass


class _Values:
    """Reads GraphQL input values starting at ``pos`` in ``text``."""

    def __init__(self, text: str, variables: dict[str, Any]):
        self.text, self.vars, self.pos = text, variables, 0

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n,":
            self.pos += 1

    def _expect(self, char: str) -> None:
        self._skip()
        if self.text[self.pos : self.pos + 1] != char:
            raise GraphQLError(f"Syntax Error: expected {char!r} at {self.pos}")
        self.pos += 1

    def _name(self) -> str:
        self._skip()
        m = re.compile(r"[A-Za-z_]\w*").match(self.text, self.pos)
        if not m:
            raise GraphQLError(f"Syntax Error: expected a name at {self.pos}")
        self.pos = m.end()
        return m.group(0)

    def arguments(self) -> dict[str, Any]:
        self._expect("(")
        out: dict[str, Any] = {}
        self._skip()
        while self.text[self.pos] != ")":
            name = self._name()
            self._expect(":")
            out[name] = self.value()
            self._skip()
        self.pos += 1
        return out

    def value(self) -> Any:
        self._skip()
        c = self.text[self.pos]
        if c == "{":
            self.pos += 1
            obj: dict[str, Any] = {}
            self._skip()
            while self.text[self.pos] != "}":
                key = self._name()
                self._expect(":")
                obj[key] = self.value()
                self._skip()
            self.pos += 1
            return obj
        if c == "[":
            self.pos += 1
            items = []
            self._skip()
            while self.text[self.pos] != "]":
                items.append(self.value())
                self._skip()
            self.pos += 1
            return items
        if c == '"':
            value, self.pos = json.JSONDecoder().raw_decode(self.text, self.pos)
            return value
        if c == "$":
            self.pos += 1
            return self.vars.get(self._name())
        m = _NUMBER.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return float(m.group(0)) if m.group(1) or m.group(2) else int(m.group(0))
        word = self._name()
        return {"true": True, "false": False, "null": None}.get(word, word)


def parse(query: str, variables: dict[str, Any] | None) -> tuple[str, str, dict[str, Any], str]:
    """(operation type, top-level field, its arguments, the rest of the document)."""
    m = _OPERATION.match(query)
    if not m:
        raise GraphQLError("Syntax Error: no operation")
    values = _Values(query, variables or {})
    values.pos = m.end()
    values._skip()
    args = values.arguments() if query[values.pos : values.pos + 1] == "(" else {}
    return m.group(1) or "query", m.group(4), args, query[values.pos :]


def _price_aliases(selection: str, variables: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for m in _ALIASED.finditer(selection):
        values = _Values(selection, variables)
        values.pos = m.end() - 1
        out[m.group(1)] = values.arguments().get("input") or {}
    if "lowestPrice" in selection and not out:
        values = _Values(selection, variables)
        values.pos = selection.index("lowestPrice") + len("lowestPrice")
        out["lowestPrice"] = values.arguments().get("input") or {}
    return out


def _graphql_pod(pod: Pod) -> dict[str, Any]:
    return {
        "id": pod.id,
        "name": pod.name,
        "desiredStatus": pod.desired,
        "costPerHr": pod.cost_per_hr if pod.desired == "RUNNING" else 0.0,
        "machineId": pod.machine_id,
        "imageName": pod.image,
        "gpuCount": pod.gpu_count,
        "env": [f"{k}={v}" for k, v in pod.env.items()],
        "runtime": pod.runtime(),
        "machine": {"podHostId": f"{pod.id}-{pod.machine_id}", "gpuDisplayName": pod.gpu.display},
    }


def _create(cloud: FakeCloud, inp: dict[str, Any], interruptible: bool) -> Pod:
    env = {e["key"]: e["value"] for e in inp.get("env") or []}
    ports = [p.strip() for p in str(inp.get("ports") or "").split(",") if p.strip()]
    cloud_type = str(inp.get("cloudType") or "SECURE")
    if cloud_type == "ALL":
        cloud_type = "SECURE"
    bid = inp.get("bidPerGpu")
    if interruptible and not cloud.spot_sold:
        raise GraphQLError(SPOT_GONE)
    if interruptible and not isinstance(bid, int | float):
        raise GraphQLError('Field "bidPerGpu" of required type "Float!" was not provided.')
    return cloud.create(
        name=str(inp.get("name") or ""),
        image=str(inp.get("imageName") or ""),
        gpu_ids=[str(inp.get("gpuTypeId") or "")],
        count=int(inp.get("gpuCount") or 1),
        cloud=cloud_type,
        interruptible=interruptible,
        env=env,
        ports=ports,
        argv=cloud.argv(str(inp.get("imageName") or ""), str(inp.get("dockerArgs") or "")),
        bid=float(bid) if interruptible else None,
        container_disk_gb=int(inp.get("containerDiskInGb") or 50),
        volume_in_gb=int(inp.get("volumeInGb") or 0),
        volume_mount_path=str(inp.get("volumeMountPath") or "/workspace"),
        network_volume_id=inp.get("networkVolumeId"),
        data_centers=[inp["dataCenterId"]] if inp.get("dataCenterId") else None,
        registry_auth_id=inp.get("containerRegistryAuthId"),
        min_vcpu=inp.get("minVcpuCount"),
        min_memory_gb=inp.get("minMemoryInGb"),
    )


def resolve(cloud: FakeCloud, query: str, variables: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON answer to one GraphQL request."""
    try:
        op, fieldname, args, selection = parse(query, variables)
        if op != ("query" if fieldname in _QUERIES else "mutation"):
            raise GraphQLError(f'Cannot query field "{fieldname}" on type "{op.title()}"')
        inp = args.get("input") or {}
        return {"data": {fieldname: _field(cloud, fieldname, inp, selection, variables or {})}}
    except GraphQLError as exc:
        return {"errors": [{"message": str(exc), "extensions": {"code": "GRAPHQL_VALIDATION"}}]}
    except CloudError as exc:
        code = "NOT_FOUND" if exc.status == 404 else "BAD_REQUEST"
        return {"errors": [{"message": exc.message, "extensions": {"code": code}}]}


def _field(
    cloud: FakeCloud, name: str, inp: dict[str, Any], selection: str, variables: dict[str, Any]
) -> Any:
    if name == "gpuTypes":
        aliases = _price_aliases(selection, variables)
        with cloud.lock:
            return [
                _gpu_type(cloud, g, aliases)
                for g in cloud.gpus.values()
                if not inp.get("id") or inp["id"] == g.id
            ]
    if name == "pod":
        with cloud.lock:
            pod = cloud.pods.get(str(inp.get("podId")))
            return _graphql_pod(pod) if pod else None
    if name == "myself":
        with cloud.lock:
            return {
                "pods": [_graphql_pod(p) for p in cloud.pods.values()],
                "networkVolumes": [
                    {k: v[k] for k in ("id", "name", "size")} | {"dataCenterId": v["dataCenter"]}
                    for v in cloud.volumes.values()
                ],
            }
    if name in ("podRentInterruptable", "podFindAndDeployOnDemand"):
        return _graphql_pod(_create(cloud, inp, name == "podRentInterruptable"))
    pod_id = str(inp.get("podId") or "")
    if name == "podStop":
        pod = cloud.stop(pod_id)
        return {"id": pod.id, "desiredStatus": pod.desired}
    if name in ("podResume", "podBidResume"):
        pod = cloud.get(pod_id)
        if name == "podBidResume" and not pod.interruptible:
            raise GraphQLError("podBidResume is for spot pods; use podResume")
        pod = cloud.start(pod_id, inp.get("bidPerGpu") if name == "podBidResume" else None)
        return {"id": pod.id, "desiredStatus": pod.desired}
    if name == "podTerminate":
        cloud.delete(pod_id)
        return None
    raise GraphQLError(f'Cannot query field "{name}"')


def _gpu_type(cloud: FakeCloud, gpu: Any, aliases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": gpu.id,
        "displayName": gpu.display,
        "memoryInGb": gpu.memory_gb,
        "maxGpuCount": gpu.max_count,
        "secureCloud": gpu.prices["securePrice"] is not None,  # sold there, stock or not
        "communityCloud": gpu.prices["communityPrice"] is not None,
        **gpu.prices,
    }
    if not cloud.spot_sold:
        out.update(secureSpotPrice=None, communitySpotPrice=None)
    for alias, spec in aliases.items():
        cloud_type = "SECURE" if spec.get("secureCloud", True) else "COMMUNITY"
        count = int(spec.get("gpuCount") or 1)
        spot, price = gpu.price(cloud_type, True), gpu.price(cloud_type, False)
        if not cloud.spot_sold:
            spot = None
        out[alias] = {
            "minimumBidPrice": spot,
            "uninterruptablePrice": price,
            "stockStatus": cloud.stock(gpu, cloud_type, count) if price is not None else None,
            "availableGpuCounts": [n for n in (1, 2, 4, 8) if cloud.free(gpu, cloud_type) >= n],
        }
    return out
