"""Named network volumes (``spec.volumes``) on RunPod: where a pod that mounts one may run, the
volume created when missing, and ``corral volume ls/rm``.

A RunPod network volume lives in one data center and a pod mounts at most one
(``mounts.network``, REST v2). A job naming a volume that exists runs in that volume's data
center (any of them, if several volumes carry the name); a job naming a new one gets offers
pinned to each data center that has its GPU, and the launch creates the volume there
(``POST /v2/network-volumes``) before it creates the pod. RunPod volumes carry no tags, so
every network volume of the account is listed, and a name is matched exactly.

Nothing here deletes a volume but :meth:`NamedVolumes.remove` (``corral volume rm``): not a
run's end, not the leak sweep, not a pod's termination (v2 only detaches it).
"""

from __future__ import annotations

import builtins
import logging
from typing import Any

from corral.errors import (
    BadInput,
    Conflict,
    InfeasibleRequest,
    NoCapacity,
    NotFound,
    ProviderError,
)
from corral.providers.base import Offer, Requirements, VolumeInfo
from corral.providers.runpod.api import RunPodAPI
from corral.providers.runpod.pods import NetworkVolume
from corral.providers.runpod.settings import RunPodSettings

log = logging.getLogger("corral.providers.runpod")
#: RunPod's size limits of a network volume, GB
MIN_GB, MAX_GB = 10, 4096


class NamedVolumes:
    def __init__(self, api: RunPodAPI, settings: RunPodSettings, provider: str = "runpod"):
        self.api, self.settings, self.provider = api, settings, provider

    def placement(self, req: Requirements) -> tuple[list[str] | None, bool]:
        """(the data centers a pod for ``req`` must run in, or None: anywhere; whether the
        volume is new, so each offer needs a data center of its own). InfeasibleRequest when
        RunPod cannot mount what the job names."""
        if not req.volumes:
            return None, False
        if len(req.volumes) > 1:
            names = ", ".join(v.name for v in req.volumes)
            raise InfeasibleRequest(
                f"runpod pods mount one network volume; the job names {len(req.volumes)} ({names})"
            )
        if self.settings.network_volume_id:
            raise InfeasibleRequest(
                "runpod: CORRAL_RUNPOD_NETWORK_VOLUME_ID already mounts a network volume in "
                "every pod (for checkpoints), and a pod mounts only one"
            )
        want = req.volumes[0]
        if want.size_gb > MAX_GB:
            raise InfeasibleRequest(
                f"runpod network volumes hold at most {MAX_GB} GB; volume {want.name!r} "
                f"asks for {want.size_gb} GB"
            )
        found = sorted({v.data_center for v in self._named(want.name) if v.data_center})
        return (found, False) if found else (None, True)

    def _named(self, name: str, region: str | None = None) -> list[NetworkVolume]:
        return [
            v
            for v in self.api.list_volumes()
            if v.name == name and (region is None or v.data_center == region)
        ]

    def ensure(self, offer: Offer) -> tuple[str, str] | None:
        """(volume id, mount path) of the network volume the offer's pod mounts, created in
        the offer's data center if it is missing; None when the job names no volume."""
        wanted: list[dict[str, Any]] = offer.details.get("volumes") or []
        if not wanted:
            return None
        want = wanted[0]
        dc = offer.details.get("data_center_id")
        if not dc:
            raise BadInput(f"offer {offer.offer_id!r} names no data center for its volume")
        named = self._named(want["name"])
        found = [v for v in named if v.data_center == dc]
        if found:
            volume = sorted(found, key=lambda v: v.id)[0]
        elif named:  # made since the offers were listed (an earlier try of this launch)
            where = ", ".join(sorted({v.data_center for v in named}))
            raise NoCapacity(
                f"runpod: network volume {want['name']!r} is in {where} now, not in {dc}"
            )
        else:
            size = min(MAX_GB, max(MIN_GB, int(want["size_gb"])))
            volume = self.api.create_volume(want["name"], size, dc)
            log.info("runpod: created network volume %s (%s) in %s", volume.id, want["name"], dc)
        return volume.id, str(want["mount"])

    def list(self) -> list[VolumeInfo]:
        users = self._users()
        return [
            VolumeInfo(
                provider=self.provider,
                name=v.name,
                volume_id=v.id,
                region=v.data_center,
                size_gb=v.size,
                state="in-use" if users.get(v.id) else "available",
                attached_to=users.get(v.id, []),
            )
            for v in sorted(self.api.list_volumes(), key=lambda v: (v.name, v.data_center, v.id))
        ]

    def _users(self) -> dict[str, builtins.list[str]]:
        """Volume id -> the pods (not terminated) that mount it."""
        out: dict[str, list[str]] = {}
        for pod in self.api.list_pods():
            if pod.state_word == "TERMINATED":
                continue
            for mount in (pod.mounts or {}).get("network") or []:
                if isinstance(mount, dict) and mount.get("volumeId"):
                    out.setdefault(str(mount["volumeId"]), []).append(pod.id)
        return out

    def remove(self, name: str, region: str | None = None) -> builtins.list[VolumeInfo]:
        found = [v for v in self.list() if v.name == name and region in (None, v.region)]
        where = f" in {region}" if region else ""
        if not found:
            raise NotFound(f"runpod: no network volume named {name!r}{where}")
        if len(found) > 1 and region is None:
            places = ", ".join(v.region for v in found)
            raise BadInput(
                f"runpod: {len(found)} network volumes are named {name!r} ({places}): "
                "say which with --region"
            )
        busy = [v for v in found if v.attached_to]
        if busy:
            pods = ", ".join(p for v in busy for p in v.attached_to)
            raise Conflict(
                f"runpod: network volume {name!r}{where} is mounted by pod(s) {pods}; "
                "stop or cancel their runs first"
            )
        for v in found:
            try:
                self.api.delete_volume(v.volume_id)
            except ProviderError as exc:
                raise ProviderError(
                    f"runpod: cannot delete network volume {name!r} ({v.volume_id}): {exc.message}"
                ) from None
            log.info("runpod: deleted network volume %s (%s)", v.volume_id, name)
        return found
