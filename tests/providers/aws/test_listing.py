"""Statuses read from one shared listing per region (``list_cache_s``): what each costs in
EC2 calls (counted with botocore's event hooks on the provider's own client), what is still
asked for alone (just launched, acted on, gone), when a change is seen, and the listing off.
The spot request batching is checked against a recording fake client: moto's instances carry
no spot request."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from corral.errors import NotYetTerminated, ProviderError, ProviderUnavailable
from corral.providers.aws.listing import SPOT_IDS_PER_CALL, InstanceListing
from corral.providers.aws.provider import AwsProvider
from corral.providers.base import Instance, InstanceState

from ..contract import new_key
from .test_provider import bootstrap, pick

REGION = "us-east-1"


class Calls:
    """EC2 operations the provider's client sends, by name; listings (``Filters``) apart from
    single-instance describes (``InstanceIds``)."""

    def __init__(self, provider: AwsProvider) -> None:
        self.ops: Counter[str] = Counter()
        self.lock = threading.Lock()
        events = provider.ec2.client(REGION).meta.events
        events.register("before-parameter-build.ec2", self._seen)

    def _seen(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        name = model.name
        if name == "DescribeInstances":
            name += "(ids)" if "InstanceIds" in params else "(listing)"
        with self.lock:
            self.ops[name] += 1

    def take(self) -> Counter[str]:
        with self.lock:
            seen, self.ops = self.ops, Counter()
        return seen


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def launch(p: AwsProvider, tmp_path: Path, n: int, spot: bool = False) -> list[Instance]:
    offer = pick(p, spot=spot)
    out = []
    for _ in range(n):
        key = new_key()
        out.append(p.launch(offer, bootstrap(tmp_path, key), key))
    return out


def test_n_instances_statuses_cost_one_describe_instances_per_refresh(
    make_provider, tmp_path, clock
):
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=3.0)
    insts = launch(p, tmp_path, 6)
    calls = Calls(p)
    assert [p.status(i).state for i in insts] == [InstanceState.RUNNING] * 6
    assert calls.take() == {"DescribeInstances(listing)": 1}
    clock.now += 3.0  # the cache time: one listing more serves them all again
    assert all(p.status(i).state == InstanceState.RUNNING for i in insts)
    assert calls.take() == {"DescribeInstances(listing)": 1}
    # a second look at one instance within the cache time lists again (never the same
    # state twice), and that listing serves the others' next looks
    clock.now += 1.0
    p.status(insts[0])
    assert calls.take() == {"DescribeInstances(listing)": 1}
    assert all(p.status(i).state == InstanceState.RUNNING for i in insts[1:])
    assert calls.take() == {}


@pytest.mark.parametrize("cache_s", [3.0, 0.0])
def test_a_minute_of_polls_costs_one_listing_per_cache_time_whatever_the_runs(
    make_provider, tmp_path, clock, cache_s
):
    """Every run polled every 5 s (provider_poll_s), spread over the interval, for a minute
    of simulated time."""
    runs, poll_s, minute = 30, 5.0, 60.0
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=cache_s)
    insts = launch(p, tmp_path, runs, spot=True)
    calls = Calls(p)
    start = clock.now
    looks = sorted(
        (k * poll_s + i * poll_s / runs, i)
        for k in range(int(minute / poll_s))
        for i in range(runs)
    )
    for at, i in looks:
        clock.now = start + at
        assert p.status(insts[i]).state == InstanceState.RUNNING
    if cache_s:
        seen = calls.take()
        assert set(seen) == {"DescribeInstances(listing)"}  # nothing asked alone
        assert seen["DescribeInstances(listing)"] <= minute / cache_s + 1  # ~20, not 360
    else:
        assert calls.take() == {"DescribeInstances(ids)": len(looks)}


def test_sixteen_workers_at_once_share_one_listing(make_provider, tmp_path, clock):
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=3.0)
    insts = launch(p, tmp_path, 16)
    calls = Calls(p)
    start = threading.Barrier(len(insts))
    states: list[InstanceState] = []

    def poll(inst: Instance) -> None:
        start.wait()
        states.append(p.status(inst).state)

    workers = [threading.Thread(target=poll, args=(i,)) for i in insts]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert states == [InstanceState.RUNNING] * 16
    assert calls.take() == {"DescribeInstances(listing)": 1}


def test_the_listing_off_asks_for_each_instance_alone(make_provider, tmp_path, clock):
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=0)
    insts = launch(p, tmp_path, 4)
    calls = Calls(p)
    assert all(p.status(i).state == InstanceState.RUNNING for i in insts)
    assert calls.take() == {"DescribeInstances(ids)": 4}


def test_an_instance_launched_after_the_listing_is_asked_for_alone(make_provider, tmp_path, clock):
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=3.0)
    [first] = launch(p, tmp_path, 1)
    p.status(first)  # the listing is taken now
    [second] = launch(p, tmp_path, 1)
    calls = Calls(p)
    st = p.status(second)
    assert st.state == InstanceState.RUNNING and st.endpoint
    assert calls.take() == {"DescribeInstances(ids)": 1}
    # not visible anywhere yet (eventual consistency): young = provisioning, old = gone
    young = second.model_copy(update={"instance_id": "i-0123456789abcdef0"})
    assert p.status(young).detail == "not visible yet"
    clock.now += 120.0
    assert p.status(young).state == InstanceState.TERMINATED


def test_a_reclaim_is_seen_once_the_cache_time_is_over(make_provider, aws, tmp_path, clock):
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=3.0)
    watched, other = launch(p, tmp_path, 2, spot=True)
    assert p.status(other).state == InstanceState.RUNNING  # the listing is taken
    aws.reclaim(watched.instance_id)
    # within the cache time, an instance not looked at since reads the listing's state...
    assert p.status(watched).state == InstanceState.RUNNING
    clock.now += 3.0  # ...and the reclaim once it is over
    st = p.status(watched)
    assert st.state == InstanceState.PREEMPTED and "EC2 reclaimed" in st.detail
    assert p.status(other).state == InstanceState.RUNNING  # it reads that listing
    aws.reclaim(other.instance_id)
    clock.now += 1.0  # within the cache time, its second look lists again: seen at once
    assert p.status(other).state == InstanceState.PREEMPTED


def test_what_the_provider_terminates_is_not_read_from_an_older_listing(
    make_provider, tmp_path, clock
):
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=3.0)
    doomed, other = launch(p, tmp_path, 2)
    p.status(other)  # the listing is taken while both run
    with contextlib.suppress(NotYetTerminated):  # shutting-down: terminated all the same
        p.terminate(doomed)
    calls = Calls(p)
    assert p.status(doomed).state.gone
    assert calls.take()["DescribeInstances(ids)"] == 1
    clock.now += 0.5
    assert p.status(doomed).state.gone  # the next listing lacks it: asked alone again


# --- the listing itself, against a recording fake client ------------------------------------


class FakeEc2:
    """``instances`` and ``pages`` as :class:`~corral.providers.aws.client.Ec2` has them."""

    def __init__(self, items: list[dict[str, Any]], codes: dict[str, str]) -> None:
        self.items, self.codes = items, codes
        self.calls: list[tuple[str, Any]] = []
        self.fail: ProviderError | None = None
        self.spot_fail: ProviderError | None = None

    def instances(self, region: str, **kw: Any) -> list[dict[str, Any]]:
        self.calls.append(("describe_instances", kw))
        if self.fail is not None:
            raise self.fail
        return list(self.items)

    def pages(self, region: str, op: str, key: str, **kw: Any) -> list[dict[str, Any]]:
        self.calls.append((op, kw))
        if self.spot_fail is not None:
            raise self.spot_fail
        [flt] = kw["Filters"]
        assert flt["Name"] == "spot-instance-request-id"
        return [
            {"SpotInstanceRequestId": r, "Status": {"Code": self.codes[r]}}
            for r in flt["Values"]
            if r in self.codes
        ]


def spot_item(n: int) -> dict[str, Any]:
    return {
        "InstanceId": f"i-{n:017x}",
        "State": {"Name": "running"},
        "InstanceLifecycle": "spot",
        "SpotInstanceRequestId": f"sir-{n:08x}",
    }


def test_spot_request_codes_are_read_once_per_refresh_for_every_listed_spot_instance():
    items = [spot_item(n) for n in range(SPOT_IDS_PER_CALL + 20)]
    items.append({"InstanceId": "i-on-demand", "State": {"Name": "running"}})
    codes = {i["SpotInstanceRequestId"]: "fulfilled" for i in items[:-1]}
    codes["sir-00000003"] = "marked-for-termination"
    ec2 = FakeEc2(items, codes)
    listing = InstanceListing(ec2, "me", 3.0, lambda: 100.0, "corral:owner")  # type: ignore[arg-type]
    got = {i["InstanceId"]: listing.get(REGION, i["InstanceId"]) for i in items}
    ops = Counter(op for op, _ in ec2.calls)
    # one listing; the spot requests in as few calls as a filter's values allow
    assert ops == {"describe_instances": 1, "describe_spot_instance_requests": 2}
    filters = ec2.calls[0][1]["Filters"]
    assert {"Name": "tag:corral:owner", "Values": ["me"]} in filters
    assert {f["Name"] for f in filters} == {"tag:corral:owner", "instance-state-name"}
    assert got["i-00000000000000003"].spot_code == "marked-for-termination"  # type: ignore[union-attr]
    assert got["i-00000000000000004"].spot_code == "fulfilled"  # type: ignore[union-attr]
    assert got["i-on-demand"] is not None and not got["i-on-demand"].spot_known
    assert listing.get(REGION, "i-not-listed") is None


def test_unreadable_spot_requests_leave_the_state_reason_to_tell():
    ec2 = FakeEc2([spot_item(1)], {})
    ec2.spot_fail = ProviderError("aws: not authorized")
    listing = InstanceListing(ec2, "me", 3.0, lambda: 100.0, "corral:owner")  # type: ignore[arg-type]
    got = listing.get(REGION, "i-00000000000000001")
    assert got is not None and got.spot_known and got.spot_code is None


def test_a_failed_listing_answers_every_caller_for_the_cache_time_without_asking_again():
    now = [100.0]
    ec2 = FakeEc2([spot_item(1), spot_item(2)], {})
    ec2.fail = ProviderUnavailable("aws: RequestLimitExceeded", fields={"aws_code": "x"})
    listing = InstanceListing(ec2, "me", 3.0, lambda: now[0], "corral:owner")  # type: ignore[arg-type]
    for iid in ("i-00000000000000001", "i-00000000000000002"):
        with pytest.raises(ProviderUnavailable, match="RequestLimitExceeded"):
            listing.get(REGION, iid)
    assert len(ec2.calls) == 1
    ec2.fail = None
    now[0] += 3.0
    assert listing.get(REGION, "i-00000000000000001") is not None
    assert len(ec2.calls) == 3  # listed again (and its spot requests)


def test_a_data_volume_the_listing_shows_attached_is_not_asked_about_again(
    make_provider, tmp_path, clock
):
    p = make_provider(machine_runner=None, clock=clock, list_cache_s=3.0, data_volume_gb=10)
    [inst] = launch(p, tmp_path, 1)
    calls = Calls(p)
    assert p.status(inst).detail == ""  # attached now
    assert calls.take()["AttachVolume"] == 1
    clock.now += 3.0
    assert p.status(inst).detail == ""
    assert calls.take() == {"DescribeInstances(listing)": 1}  # no DescribeVolumes


def test_a_caller_waits_a_bounded_time_for_another_callers_slow_refresh():
    """EC2 throttling a refresh (botocore retrying) holds only that caller: the others get a
    retryable error after the wait instead of every poll worker hanging on the region."""
    release, entered = threading.Event(), threading.Event()
    ec2 = FakeEc2([spot_item(1), spot_item(2)], {})
    real = ec2.instances

    def slow(region: str, **kw: Any) -> list[dict[str, Any]]:
        entered.set()
        assert release.wait(10)
        return real(region, **kw)

    ec2.instances = slow  # type: ignore[method-assign]
    listing = InstanceListing(
        ec2,  # type: ignore[arg-type]
        "me",
        3.0,
        lambda: 100.0,
        "corral:owner",
        refresh_wait_s=0.2,
    )
    first: list[Any] = []
    refreshing = threading.Thread(
        target=lambda: first.append(listing.get(REGION, "i-00000000000000001"))
    )
    refreshing.start()
    assert entered.wait(10)  # the first caller is inside its refresh
    began = time.monotonic()
    with pytest.raises(ProviderUnavailable, match="try later") as err:
        listing.get(REGION, "i-00000000000000002")
    assert 0.15 <= time.monotonic() - began < 2
    assert err.value.retryable and err.value.fields == {"region": REGION}
    release.set()
    refreshing.join(10)
    assert first and first[0] is not None
    # the listing the slow caller took answers the other one now, without another call
    calls = len(ec2.calls)
    assert listing.get(REGION, "i-00000000000000002") is not None
    assert len(ec2.calls) == calls
