"""The AWS EC2 provider: GPU instances, spot or on-demand, running corral's agent.

* **Offers** (:mod:`.offers`): the bundled dated catalog's GPU instance types, on-demand at
  the live price of the AWS Price List API (:mod:`.prices`, cached ``price_cache_s``; the
  catalog's price where it cannot be read), plus one spot offer per availability zone at the
  live price from ``describe_spot_price_history`` (cached ``spot_cache_s``); :meth:`refresh`
  drops both. Each offer names its price's source and date.
* **Launch** (:mod:`.launch`, :mod:`.userdata`): ``run_instances`` with ``ClientToken`` = the
  key and ``corral:*`` tags; before calling, the key is looked up by tag, and after a timeout
  it is looked up again before the (same-token) retry, so a key never pays for two machines.
  gp3 root volume sized from ``resources.disk``, optional persistent data volume
  (:mod:`.volumes`), a security group admitting only the controller to the agent's port
  (:mod:`.network`), IMDSv2 only, instance-initiated shutdown = terminate, and user-data that
  installs corral and starts the agent.
* **Status** (:mod:`.mapping`): every EC2 state onto :class:`InstanceState`, PREEMPTED for a
  reclaimed spot instance (``StateReason`` or the spot request's status). Read from one
  listing per region of the owner's instances shared by every run (:mod:`.listing`, kept
  ``list_cache_s``); an instance it lacks (just launched, gone) or that the provider acted on
  since is asked for alone.
* **An image that cannot run corral** (its python is older than 3.11): the node bootstrap says
  why on the console and powers the machine off; :meth:`status` reads the console of a machine
  that powered itself off and fails the attempt with that reason, and :meth:`launch` refuses
  that image from then on (:class:`BadInput`: the run fails at once instead of booting the
  same failure once per attempt), a restarted controller too (:mod:`.image_refusals`).
* **Gangs** (:mod:`.gang`, :mod:`.placement`, :mod:`.gang_group`): the nodes of a multi-node
  attempt, one ``run_instances`` each on its own key, in the head's zone, the run's cluster
  placement group and the run's own security group, which admits its nodes to one another;
  :meth:`release_run` deletes both groups.
* **Terminate** is idempotent (missing = done; ``shutting-down`` = :class:`NotYetTerminated`).
* **Leak sweep**: :meth:`sweep` terminates this controller's instances whose key is not active
  and deletes what outlives them of runs that are over (data volumes, the gangs' groups).

* **Node** (:meth:`node_profile`): what its machines need from the agent plan (bind address,
  data-volume checkpoints, grace cap, power-off, the spot-notice hook :mod:`.notices`).

Credentials come only from the boto3 session. ``machine_runner`` plays the machines where
nothing boots them (moto in tests: ``corral.testing.aws`` injects one).
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol

import httpx

from corral import paths
from corral.errors import (
    AuthFailed,
    BadInput,
    InfeasibleRequest,
    MaybeLaunched,
    NoCapacity,
    NotYetTerminated,
    ProviderError,
)
from corral.pricing import Catalog, load_catalog
from corral.providers.aws import launch as L
from corral.providers.aws import named, volumes
from corral.providers.aws.client import Ec2
from corral.providers.aws.errors import NOT_FOUND
from corral.providers.aws.gang import Ec2Gangs
from corral.providers.aws.housekeeping import Housekeeping
from corral.providers.aws.image_refusals import ImageRefusals
from corral.providers.aws.listing import LIVE, InstanceListing, Listed
from corral.providers.aws.mapping import is_spot, map_state, state_name, tags
from corral.providers.aws.offers import SpotPriceCache, _offer, build_offers, parse_offer_id
from corral.providers.aws.prices import OnDemandPriceCache
from corral.providers.aws.settings import AwsSettings, settings_from_env
from corral.providers.aws.userdata import node_profile, unusable_image_reason
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    NodeProfile,
    Offer,
    Provider,
    Requirements,
    SupportsLogs,
    SupportsPreemptionNotice,
    SupportsPriceRefresh,
    SupportsSpot,
    SupportsVolumes,
    VolumeRequest,
)

log = logging.getLogger("corral.providers.aws")
#: an instance this young may not be visible to describe_instances yet (eventual consistency)
VISIBILITY_GRACE_S = 60.0


class MachineRunner(Protocol):
    """Runs the agent of an instance somewhere (tests: on this machine)."""

    def boot(self, instance_id: str, instance_type: str, user_data: str) -> None: ...
    def booted(self, instance_id: str) -> bool: ...
    def endpoint(self, instance_id: str) -> str | None: ...
    def spot_status(self, instance_id: str) -> str | None: ...
    def stop(self, instance_id: str) -> None: ...
    def console(self, instance_id: str) -> str | None: ...


class AwsProvider(
    Housekeeping,
    Provider,
    SupportsSpot,
    SupportsVolumes,
    SupportsPreemptionNotice,
    SupportsLogs,
    SupportsPriceRefresh,
    Ec2Gangs,
):
    name: ClassVar[str] = "aws"
    shared_machines: ClassVar[bool] = True
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsStop": "corral's EC2 instances terminate on shutdown (one-time spot requests "
        "cannot be stopped); a stopped run resumes from its checkpoints on a new instance",
        "SupportsSimulatedPreemption": "EC2 cannot be asked from corral to reclaim an "
        "instance; AWS Fault Injection Service can send real spot interruptions",
    }

    def __init__(
        self,
        session: Any = None,
        *,
        endpoint_url: str | None = None,
        http: httpx.Client | None = None,
        machine_runner: MachineRunner | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        environ: dict[str, str] | None = None,
        catalog: Catalog | None = None,
        endpoints: dict[str, str] | None = None,
        home: Path | None = None,
        **settings: Any,
    ) -> None:
        self.settings: AwsSettings = settings_from_env(environ, **settings)
        self.ec2 = Ec2(session, endpoint_url, endpoints)
        self.catalog = catalog or load_catalog("aws", "ec2")
        self.clock, self.sleep = clock, sleep
        types = [e.instance_type for e in self.catalog.entries]
        self.spot_prices = SpotPriceCache(self.ec2, types, self.settings.spot_cache_s, clock)
        self.on_demand_prices = OnDemandPriceCache(
            self.ec2, types, self.settings.price_cache_s, clock
        )
        self.spot_errors: dict[str, str] = {}
        self.price_errors: dict[str, str] = {}
        self.launcher = L.Launcher(self.ec2, self.settings, http)
        self.runner = machine_runner
        self.listing = InstanceListing(
            self.ec2, self.settings.owner, self.settings.list_cache_s, clock, L.TAG_OWNER
        )
        #: (region, AMI) -> why it cannot run corral, as a machine of it said on its console
        self.unusable_images = ImageRefusals((home or paths.home()) / "aws")
        self._boot_verdicts: dict[str, str | None] = {}
        self._head_zones: dict[tuple[str, int], str] = {}
        self._cluster_types: dict[tuple[str, str], bool] = {}
        self._groups_refused: dict[str, float] = {}

    # --- regions and offers -----------------------------------------------------------------

    @property
    def regions(self) -> list[str]:
        """Regions offered when the job names none."""
        return self.settings.regions or [self.ec2.default_region or "us-east-1"]

    def _scan_regions(self) -> list[str]:
        """Where corral's instances may be: the configured regions, then every catalog region."""
        return list(dict.fromkeys([*self.regions, *self.catalog.regions()]))

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        self.ec2.check_credentials()  # nothing can be launched without: say so now
        regions = self._asked_regions(req)

        def note(region: str, exc: ProviderError) -> None:
            self.spot_errors[region] = exc.message
            log.warning("aws: no spot prices for %s: %s", region, exc.message)

        def price_note(region: str, exc: ProviderError) -> None:
            if self.price_errors.get(region) != exc.message:  # once per distinct failure
                log.warning(
                    "aws: on-demand prices for %s from the catalog of %s: the Price List API "
                    "failed: %s",
                    region,
                    self.catalog.date,
                    exc.message,
                )
            self.price_errors[region] = exc.message

        pinned = named.placement(req, self._scan, self._named_in)
        found = build_offers(
            self.name,
            self.catalog,
            req,
            regions,
            self.spot_prices.get,
            note,
            self.on_demand_prices.get if self.settings.live_prices else None,
            price_note,
        )
        return named.fit(found, req, pinned)

    def _asked_regions(self, req: Requirements) -> list[str]:
        """The regions to offer in: the job's that AWS has prices for (others may be another
        provider's), else the configured ones. :class:`InfeasibleRequest` naming the job's
        regions if none of them is one."""
        if req.regions is None:
            return self.regions
        known = {*self.catalog.regions(), *self.settings.regions}
        regions = [r for r in req.regions if r in known]
        if req.regions and not regions:
            names = ", ".join(repr(r) for r in req.regions)
            raise InfeasibleRequest(
                f"aws has no region {names} (its catalog of {self.catalog.date} prices "
                f"{len(self.catalog.regions())} regions: {', '.join(self.catalog.regions())})"
            )
        return regions

    def refresh(self) -> None:
        """Forget cached live prices: the next :meth:`offers` asks AWS again."""
        self.spot_prices.clear()
        self.spot_errors.clear()
        self.on_demand_prices.clear()
        self.price_errors.clear()

    def refresh_prices(self) -> str | None:
        """SupportsPriceRefresh: spot and on-demand prices are read again on the next
        :meth:`offers`."""
        self.refresh()
        from datetime import UTC, datetime

        return datetime.now(UTC).isoformat(timespec="seconds")

    def release_run(self, run_id: str) -> None:
        """The run's data volumes and its gangs' placement group and security group go once
        its instances are gone (:class:`NotYetTerminated` while one is still in a group)."""
        self.release_volumes(run_id)
        self.release_placement(run_id)
        self.release_security_groups(run_id)

    # --- the node ---------------------------------------------------------------------------

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        """An EC2 machine's needs (:func:`.userdata.node_profile`); a spot offer gets the
        spot-notice hook."""
        s = self.settings
        return node_profile(
            run_id,
            port=s.agent_port,
            spot=offer.spot,
            data_mount=s.data_mount if s.data_volume_gb else None,
            max_grace_s=s.max_grace_s,
            root=s.remote_root,
        )

    # --- launch -----------------------------------------------------------------------------

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        L.check_key(key)
        parsed = parse_offer_id(offer.offer_id) if offer.provider == self.name else None
        entry = self.catalog.entry(parsed[1]) if parsed else None
        if parsed is None or entry is None:
            raise BadInput(f"offer {offer.offer_id!r} ({offer.provider}) is not an AWS offer")
        plan = bootstrap.plan
        region = offer.region
        found = self._find_in(region, key)
        if found is not None:  # idempotent: the instance launched with this key
            return self._launched(found, bootstrap)
        image_id = self.launcher.image(region)[0]
        why = self.unusable_images.get(region, image_id)
        if why is not None:
            raise BadInput(
                f"aws: image {image_id} cannot run corral ({why}): set CORRAL_AWS_IMAGE_ID or "
                "CORRAL_AWS_IMAGE_PARAMETER to an image with python 3.11 or later"
            )
        spot = parsed[2]
        offer = self._volumes_still_here(offer, spot, parsed[0])
        zone, group = parsed[0] if spot else None, None
        gang = bootstrap.gang
        if gang is not None and offer.details.get("volumes"):
            raise BadInput(
                "aws: a multi-node job cannot mount named volumes (volumes): an EBS volume "
                "attaches to one instance; use checkpoints.storage"
            )
        if gang is not None:  # one zone, the run's placement group (gang.py)
            zone, group = self._gang_place(
                region, plan.run_id, plan.attempt, gang, entry.instance_type, zone
            )
        request = self.launcher.request(
            offer, entry, plan, bootstrap, key, spot=spot, zone=zone, placement_group=group
        )
        try:
            resp = self.ec2.call(region, "run_instances", **request)
        except MaybeLaunched:
            # the request may have gone through: look before asking again (same ClientToken)
            found = self._find_after_timeout(region, key)
            if found is not None:
                return self._launched(found, bootstrap)
            resp = self.ec2.call(region, "run_instances", **request)
        return self._launched(self._instance(region, resp["Instances"][0], key), bootstrap)

    def _launched(self, instance: Instance, bootstrap: Bootstrap) -> Instance:
        """``instance``, launched for ``bootstrap``; a gang's head: its zone kept for the
        other nodes."""
        if bootstrap.gang is not None and bootstrap.gang.rank == 0:
            plan = bootstrap.plan
            self._head_launched(plan.run_id, plan.attempt, instance.data.get("zone"))
        return instance

    def _volumes_still_here(self, offer: Offer, spot: bool, place: str) -> Offer:
        """The offer, pinned to its named volumes' zone if they were made since it was listed
        (an earlier try of this launch elsewhere); NoCapacity if they are elsewhere."""
        wanted = offer.details.get("volumes") or []
        if not wanted or offer.details.get("volume_zone"):
            return offer
        req = Requirements(volumes=[VolumeRequest.model_validate(w) for w in wanted])
        pinned = named.placement(req, self._scan, self._named_in)
        if pinned is None:
            return offer
        region, zone = pinned
        if region != offer.region or (spot and place != zone):
            raise NoCapacity(f"aws: the job's volumes are in {zone} now, not where this offer is")
        return offer.model_copy(update={"details": {**offer.details, "volume_zone": zone}})

    def _find_after_timeout(self, region: str, key: str, tries: int = 3) -> Instance | None:
        for i in range(tries):
            found = self._find_in(region, key)
            if found is not None:
                return found
            if i + 1 < tries:
                self.sleep(1.0)
        return None

    # --- instances --------------------------------------------------------------------------

    def _offer_of(self, region: str, item: dict[str, Any]) -> Offer:
        t = tags(item)
        itype = str(item.get("InstanceType", ""))
        entry = self.catalog.entry(itype)
        spot = is_spot(item)
        zone = (item.get("Placement") or {}).get("AvailabilityZone")
        try:
            price = float(t.get(L.TAG_PRICE, ""))
        except ValueError:  # not launched by this version: the catalog price, if any
            price = entry.prices.get(region, 0.0) if entry is not None and not spot else 0.0
        if entry is not None:
            return _offer(
                self.name,
                self.catalog,
                entry,
                region,
                Requirements(),
                zone=zone if spot else None,
                price=price,
            )
        return Offer(
            provider=self.name,
            offer_id=t.get(L.TAG_OFFER) or f"{region}:{itype}",
            region=region,
            spot=spot,
            price_per_hour=price,
        )

    def _endpoint(self, item: dict[str, Any]) -> str | None:
        if state_name(item) != "running":
            return None
        if self.runner is not None:
            return self.runner.endpoint(item["InstanceId"])
        ip = (
            item.get("PrivateIpAddress")
            if self.settings.use_private_ip
            else item.get("PublicIpAddress")
        )
        return f"http://{ip}:{self.settings.agent_port}" if ip else None

    def _instance(self, region: str, item: dict[str, Any], key: str = "") -> Instance:
        t = tags(item)
        launched = item.get("LaunchTime")
        return Instance(
            provider=self.name,
            instance_id=str(item["InstanceId"]),
            key=t.get(L.TAG_KEY) or key,
            offer=self._offer_of(region, item),
            endpoint=self._endpoint(item),
            created_at=launched if isinstance(launched, datetime) else None,
            data={
                "region": region,
                "zone": (item.get("Placement") or {}).get("AvailabilityZone"),
                "instance_type": item.get("InstanceType"),
                "spot": is_spot(item),
                "state": state_name(item),
                "run_id": t.get(L.TAG_RUN),
                "attempt": t.get(L.TAG_ATTEMPT),
                "volume_id": t.get(L.TAG_VOLUME),
                "spot_request_id": item.get("SpotInstanceRequestId"),
                "private_ip": item.get("PrivateIpAddress"),
                "rank": int(rank) if (rank := t.get(L.TAG_RANK, "")).isdigit() else None,
                "placement_group": (item.get("Placement") or {}).get("GroupName") or None,
            },
        )

    def _find_in(self, region: str, key: str) -> Instance | None:
        items = self.ec2.instances(region, Filters=[{"Name": f"tag:{L.TAG_KEY}", "Values": [key]}])
        if not items:
            return None
        # the live one if any, else the newest (launch is idempotent even after it ended)
        items.sort(key=lambda i: (state_name(i) != "terminated", i.get("LaunchTime") or 0))
        return self._instance(region, items[-1])

    def _describe(self, instance: Instance) -> tuple[str, dict[str, Any] | None]:
        region = instance.data.get("region") or instance.offer.region
        if not instance.instance_id.startswith("i-"):
            return region, None
        try:
            items = self.ec2.instances(region, InstanceIds=[instance.instance_id])
        except ProviderError as exc:
            if exc.fields.get("aws_code") in NOT_FOUND:
                return region, None
            raise
        return region, (items[0] if items else None)

    def _spot_request_code(self, region: str, item: dict[str, Any]) -> str | None:
        if not is_spot(item):
            return None
        rid = item.get("SpotInstanceRequestId")
        if rid:
            try:
                reqs = self.ec2.call(
                    region, "describe_spot_instance_requests", SpotInstanceRequestIds=[rid]
                ).get("SpotInstanceRequests", [])
            except ProviderError as exc:  # e.g. no IAM permission: StateReason still works
                log.info("aws: spot request %s not readable: %s", rid, exc.message)
                return None
            return str((reqs[0].get("Status") or {}).get("Code") or "") if reqs else None
        if self.runner is not None:
            return self.runner.spot_status(item["InstanceId"])
        return None

    def _look(self, instance: Instance) -> tuple[str, dict[str, Any] | None, str | None]:
        """(region, describe item or None, spot request code): from the shared listing, else
        (not listed, acted on since, listing off) from EC2 for this instance alone."""
        region = instance.data.get("region") or instance.offer.region
        listed: Listed | None = self.listing.get(region, instance.instance_id)
        if listed is not None:
            item = listed.item
            if listed.spot_known:
                return region, item, listed.spot_code
            return region, item, self._spot_request_code(region, item)
        region, described = self._describe(instance)
        code = self._spot_request_code(region, described) if described else None
        return region, described, code

    def status(self, instance: Instance) -> InstanceStatus:
        region, item, spot_code = self._look(instance)
        if item is None:
            born = instance.created_at
            if born is not None and self.clock() - born.timestamp() < VISIBILITY_GRACE_S:
                return InstanceStatus(state=InstanceState.PROVISIONING, detail="not visible yet")
            self._machine_gone(instance.instance_id)
            return InstanceStatus(state=InstanceState.TERMINATED, detail="instance not found")
        state, detail = map_state(item, spot_code)
        name = state_name(item)
        why = self._boot_failure(region, item) if state == InstanceState.TERMINATED else None
        if why is not None:
            state, detail = InstanceState.FAILED, f"the image cannot run corral: {why}"
        if name == "running":
            self._boot(region, item)
        elif name in ("shutting-down", "terminated", "stopped"):
            self._machine_gone(instance.instance_id)
        endpoint = self._endpoint(item)  # while it runs, even when preempted: a graceful stop
        if state == InstanceState.RUNNING and endpoint is None and self.runner is not None:
            state, detail = InstanceState.PROVISIONING, "the machine is booting"
        t = tags(item)
        volume = t.get(L.TAG_VOLUME) if name == "running" else None
        if (
            volume
            and not volumes.shown_attached(item, volume)
            and not volumes.attach(self.ec2, region, volume, item["InstanceId"])
        ):
            detail = (detail + "; " if detail else "") + "data volume not attached yet"
        if name == "running" and not self._attach_named(region, item):
            detail = (detail + "; " if detail else "") + "named volumes not attached yet"
        return InstanceStatus(state=state, detail=detail, endpoint=endpoint)

    def _boot_failure(self, region: str, item: dict[str, Any]) -> str | None:
        """Why the image of a machine that powered itself off cannot run corral, as its
        console says (read until it says, or the instance is terminated); its image is
        refused from then on."""
        if (item.get("StateReason") or {}).get("Code") != "Client.InstanceInitiatedShutdown":
            return None
        iid = str(item["InstanceId"])
        if iid not in self._boot_verdicts:
            try:
                why = unusable_image_reason(self.console(region, iid))
            except ProviderError as exc:
                log.info("aws: console of %s not readable: %s", iid, exc.message)
                return None  # asked again on the next look
            if why is None and state_name(item) != "terminated":
                return None  # EC2 posts the console output shortly after: look again
            self._boot_verdicts[iid] = why
            if why is not None and item.get("ImageId"):
                self.unusable_images.refuse(region, str(item["ImageId"]), why)
                log.warning("aws: image %s cannot run corral: %s", item["ImageId"], why)
        return self._boot_verdicts[iid]

    def _boot(self, region: str, item: dict[str, Any]) -> None:
        """Tests: start the instance's agent on this machine once EC2 says it runs."""
        iid = item["InstanceId"]
        if self.runner is None or self.runner.booted(iid):
            return
        attr = self.ec2.call(
            region, "describe_instance_attribute", InstanceId=iid, Attribute="userData"
        )
        raw = (attr.get("UserData") or {}).get("Value") or ""
        self.runner.boot(iid, str(item.get("InstanceType")), base64.b64decode(raw).decode())

    def _machine_gone(self, instance_id: str) -> None:
        if self.runner is not None:
            self.runner.stop(instance_id)

    def terminate(self, instance: Instance) -> None:
        region, item = self._describe(instance)
        if item is None or state_name(item) == "terminated":
            self._machine_gone(instance.instance_id)
            return
        current = state_name(item)
        if current != "shutting-down":
            try:
                resp = self.ec2.call(
                    region, "terminate_instances", InstanceIds=[instance.instance_id]
                )
            except ProviderError as exc:
                self.listing.touch(region, instance.instance_id)  # it may have gone through
                if exc.fields.get("aws_code") in NOT_FOUND:
                    self._machine_gone(instance.instance_id)
                    return
                raise
            self.listing.touch(region, instance.instance_id)
            changes = resp.get("TerminatingInstances") or [{}]
            current = str((changes[0].get("CurrentState") or {}).get("Name", "shutting-down"))
        self._machine_gone(instance.instance_id)
        if current != "terminated":
            raise NotYetTerminated(f"aws: {instance.instance_id} is {current}")

    def find(self, key: str) -> Instance | None:
        if not L.KEY_RE.match(key or ""):
            return None
        found = self._scan(lambda r: [f] if (f := self._find_in(r, key)) else [], first=True)
        return found[0] if found else None

    def _scan(self, fn: Callable[[str], Iterable[Any]], first: bool = False) -> list[Any]:
        """``fn(region)`` over every region corral may have used (stopping at the first
        result if ``first``); a region this account may not use (not opted in) is skipped
        unless it is configured."""
        out: list[Any] = []
        for region in self._scan_regions():
            try:
                out += list(fn(region))
            except AuthFailed:
                if region in self.regions:
                    raise
            if first and out:
                break
        return out

    def list_instances(self) -> list[Instance]:
        """This controller's instances that are not terminated, in every region."""

        def listed(region: str) -> list[Instance]:
            items = self.ec2.instances(
                region,
                Filters=[
                    {"Name": f"tag:{L.TAG_OWNER}", "Values": [self.settings.owner]},
                    {"Name": "instance-state-name", "Values": LIVE},
                ],
            )
            return [self._instance(region, i) for i in items if tags(i).get(L.TAG_KEY)]

        return self._scan(listed)
