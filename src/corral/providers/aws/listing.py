"""One short-lived listing per region of the controller's instances, shared by every run's
:meth:`~corral.providers.aws.provider.AwsProvider.status`.

Asking EC2 about each instance alone costs one ``DescribeInstances`` (and, for a spot
instance, one ``DescribeSpotInstanceRequests``) per run per look: at 1,000 spot runs polled
every 5 s, ~400 calls a second, far above what EC2 lets one account make before it answers
``RequestLimitExceeded``. Instead, one paginated ``DescribeInstances`` filtered by the
``corral:owner`` tag (states other than terminated: what the leak sweep lists) and one
``DescribeSpotInstanceRequests`` for the listed spot instances' requests serve every status
for ``list_cache_s`` seconds.

* One refresh at a time per region (the poll workers call concurrently; the others wait for
  it and read its result). A caller waits at most :data:`REFRESH_WAIT_S` for another's
  refresh (EC2 throttling, botocore retrying): then it gets a retryable
  :class:`~corral.errors.ProviderUnavailable` ("try later"), so a slow region never holds
  every poll worker, and the runs of other regions and providers are still looked at.
* An instance the provider acted on (:meth:`InstanceListing.touch`: terminate) is not read
  from a listing taken before that: its caller asks EC2 for it alone.
* An instance missing from the listing (launched since, not visible yet, terminated, or
  another owner's) is not answered here either: the caller asks for it alone, as it would
  without the listing, so the visibility grace and "gone" rules stay where they were.
* A listing answers for each instance once: an instance looked at again within the cache
  time is listed afresh (one call, for every instance), so whoever looks more often than the
  cache time (a test waiting for a state, a run whose agent is silent) still sees each change
  at its next look; the controller's regular polls (every ``provider_poll_s``, longer than
  the cache time) share one listing. A state is thus never older than the cache time, nor
  older than the previous look at the same instance.
* A failed refresh is remembered the same way: every caller gets the same error (the
  watchers treat it as "try later") without asking EC2 again meanwhile.
* ``list_cache_s`` = 0 turns the listing off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.errors import ProviderError, ProviderUnavailable
from corral.providers.aws.mapping import is_spot

if TYPE_CHECKING:
    from corral.providers.aws.client import Ec2

log = logging.getLogger("corral.providers.aws")

#: states listed: every one but ``terminated`` (as the leak sweep)
LIVE = ["pending", "running", "shutting-down", "stopping", "stopped"]
#: spot request ids per DescribeSpotInstanceRequests filter (EC2 caps a filter's values)
SPOT_IDS_PER_CALL = 100
#: how long a caller waits for another caller's refresh of the same region, in seconds
REFRESH_WAIT_S = 10.0


@dataclass(frozen=True)
class Listed:
    """One instance as a listing saw it. ``spot_code``: its spot request's status code (None:
    none, or not readable); meaningful only when ``spot_known``."""

    item: dict[str, Any]
    spot_code: str | None
    spot_known: bool


@dataclass(frozen=True)
class _Snapshot:
    taken: float
    items: dict[str, dict[str, Any]]
    spot_codes: dict[str, str]  # by spot request id
    error: ProviderError | None = None
    #: instances it answered for (each only once); guarded by the listing's lock
    seen: set[str] = field(default_factory=set)


class InstanceListing:
    """The owner's instances by region, each listing kept ``cache_s`` seconds."""

    def __init__(
        self,
        ec2: Ec2,
        owner: str,
        cache_s: float,
        clock: Callable[[], float],
        tag: str,
        *,
        refresh_wait_s: float = REFRESH_WAIT_S,
    ) -> None:
        self.ec2, self.owner, self.cache_s, self.clock, self.tag = ec2, owner, cache_s, clock, tag
        self.refresh_wait_s = refresh_wait_s
        self._lock = threading.Lock()
        self._region_locks: dict[str, threading.Lock] = {}
        self._snapshots: dict[str, _Snapshot] = {}
        self._touched: dict[str, dict[str, float]] = {}  # region -> instance id -> when

    @property
    def enabled(self) -> bool:
        return self.cache_s > 0

    def get(self, region: str, instance_id: str) -> Listed | None:
        """The instance from a listing no older than the cache time, or None: not listed, or
        acted on since the listing was taken (ask EC2 for it alone). A listing answers for
        an instance once: looking at it again lists again, so a caller that looks more often
        than the cache time never reads the same state twice. Raises the refresh's
        :class:`ProviderError` (a failed refresh is reused for the cache time, once per
        instance as well)."""
        if not self.enabled:
            return None
        snap = self._snapshot(region, instance_id)
        if snap.error is not None:
            self._seen(region, snap, instance_id)
            err = snap.error
            raise type(err)(err.message, code=err.code, fields=err.fields)
        with self._lock:
            touched = self._touched.get(region, {}).get(instance_id)
        if touched is not None and touched >= snap.taken:
            return None
        item = snap.items.get(instance_id)
        if item is None:
            return None
        self._seen(region, snap, instance_id)
        rid = item.get("SpotInstanceRequestId")
        if not is_spot(item) or not rid:
            return Listed(item, None, False)
        return Listed(item, snap.spot_codes.get(str(rid)), True)

    def touch(self, region: str, instance_id: str) -> None:
        """The provider changed the instance: listings taken until now do not answer for it."""
        with self._lock:
            self._touched.setdefault(region, {})[instance_id] = self.clock()

    def _seen(self, region: str, snap: _Snapshot, instance_id: str) -> None:
        with self._lock:
            if self._snapshots.get(region) is snap:
                snap.seen.add(instance_id)

    def _snapshot(self, region: str, instance_id: str) -> _Snapshot:
        with self._lock:
            region_lock = self._region_locks.setdefault(region, threading.Lock())
        # one refresh at a time; the others wait (not for ever) and read it
        if not region_lock.acquire(timeout=self.refresh_wait_s):
            raise ProviderUnavailable(
                f"aws: the listing of instances in {region} has taken over "
                f"{self.refresh_wait_s:g}s (EC2 slow or throttling): try later",
                fields={"region": region},
            )
        try:
            return self._refresh(region, instance_id)
        finally:
            region_lock.release()

    def _refresh(self, region: str, instance_id: str) -> _Snapshot:
        """The region's listing if fresh and not yet seen for ``instance_id``, else a new one
        (the caller holds the region's lock)."""
        with self._lock:
            snap = self._snapshots.get(region)
            fresh = snap is not None and 0 <= self.clock() - snap.taken < self.cache_s
            if snap is not None and fresh and instance_id not in snap.seen:
                return snap
        taken = self.clock()  # before the call: a change during it is "after"
        try:
            items = self._list(region)
            snap = _Snapshot(taken, items, self._spot_codes(region, items))
        except ProviderError as exc:
            log.warning("aws: cannot list instances in %s: %s", region, exc.message)
            snap = _Snapshot(taken, {}, {}, error=exc)
        with self._lock:
            self._snapshots[region] = snap
            # a touch older than the region's listing no longer matters
            touched = self._touched.get(region, {})
            self._touched[region] = {i: t for i, t in touched.items() if t >= taken}
        return snap

    def _list(self, region: str) -> dict[str, dict[str, Any]]:
        items = self.ec2.instances(
            region,
            Filters=[
                {"Name": f"tag:{self.tag}", "Values": [self.owner]},
                {"Name": "instance-state-name", "Values": LIVE},
            ],
        )
        return {str(i["InstanceId"]): i for i in items}

    def _spot_codes(self, region: str, items: dict[str, dict[str, Any]]) -> dict[str, str]:
        """Status code by spot request id of the listed spot instances' requests; empty if
        they cannot be read (no IAM right, say: ``StateReason`` still tells a reclaim)."""
        rids = sorted(
            {str(r) for i in items.values() if is_spot(i) and (r := i.get("SpotInstanceRequestId"))}
        )
        codes: dict[str, str] = {}
        try:
            for start in range(0, len(rids), SPOT_IDS_PER_CALL):
                chunk = rids[start : start + SPOT_IDS_PER_CALL]
                for req in self.ec2.pages(
                    region,
                    "describe_spot_instance_requests",
                    "SpotInstanceRequests",
                    Filters=[{"Name": "spot-instance-request-id", "Values": chunk}],
                ):
                    code = (req.get("Status") or {}).get("Code")
                    codes[str(req.get("SpotInstanceRequestId"))] = str(code or "")
        except ProviderError as exc:
            log.info("aws: spot requests in %s not readable: %s", region, exc.message)
            return {}
        return codes
