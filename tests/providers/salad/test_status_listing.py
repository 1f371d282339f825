"""The controller's census on SaladCloud: every container group of the project from one listing
(``GET …/containers``, paged, checked against the published document by the fake), read by
the mapping ``status()`` uses; a group gone from a listing that one answer held is gone
without a request of its own; a listing of several pages, or one that failed, proves no
group gone: those are asked for alone."""

from __future__ import annotations

import uuid

from corral.control.census import Census
from corral.providers.base import Instance, InstanceState, Offer
from corral.providers.salad import SaladProvider
from corral.providers.salad.bootstrap import ENV_KEY, group_name

from ..contract import check_listing_agrees_with_status, new_key
from .fake_cloud import Replica
from .fake_server import FakeSalad

OFFER = Offer(provider="salad", offer_id="salad-test", region="any", details={"priority": "batch"})
LIST = "GET /organizations/acme/projects/training/containers"


def _groups(fake: FakeSalad, n: int, *, running: bool) -> list[Instance]:
    """``n`` groups made at the fake directly (no container runs), as corral's records."""
    out = []
    for _ in range(n):
        key = new_key()
        body = {
            "name": group_name(key),
            "autostart_policy": False,
            "restart_policy": "never",
            "replicas": 1,
            "container": {
                "image": "python:3.11",
                "resources": {"cpu": 1, "memory": 1024},
                "environment_variables": {ENV_KEY: key},
            },
        }
        with fake.cloud.lock:
            group = fake.cloud.create(body, imds="")
            if running:  # a replica up on a machine (the fake's timers leave it so)
                group.status = "running"
                group.replica = Replica(str(uuid.uuid4()), str(uuid.uuid4()), state="running")
            else:
                group.status = "stopped"
        out.append(Instance(provider="salad", instance_id=group.name, key=key, offer=OFFER))
    return out


def _calls(fake: FakeSalad, before: int) -> tuple[int, int]:
    """(list pages, single group reads) the controller asked for since ``before``."""
    routes = fake.routes()[before:]
    pages = sum(r == LIST for r in routes)
    alone = sum(r.startswith(LIST + "/") and r.count("/") == 6 for r in routes)
    return pages, alone


def test_the_listing_gives_each_group_the_state_status_gives(make_provider, fake):
    provider = make_provider()
    running, by_others, preempted, gone = _groups(fake, 4, running=True)
    now = [0.0]
    census = Census(clock=lambda: now[0])
    machines = [running, by_others, preempted, gone]
    for i, inst in enumerate(machines):  # the first listing: each runs on its first machine
        assert census.status("salad", provider, inst, f"r{i}", 5.0).state == "RUNNING"
    with fake.cloud.lock:
        fake.cloud.groups[by_others.instance_id].status = "stopped"  # from the portal
        fake.cloud.groups[preempted.instance_id].replica.state = "allocating"  # node lost
        del fake.cloud.groups[gone.instance_id]
    now[0] += 5.0
    before = len(fake.routes())
    check_listing_agrees_with_status(
        census,
        provider,
        machines,
        lambda: _calls(fake, before),
        [
            InstanceState.RUNNING,
            InstanceState.FAILED,
            InstanceState.PREEMPTED,
            InstanceState.TERMINATED,
        ],
    )


def test_a_listing_of_several_pages_or_a_failed_one_never_makes_a_group_gone(make_provider, fake):
    provider = make_provider(list_cache_s=30.0)  # status() shares the census's listing
    machines = _groups(fake, 130, running=False)
    now = [0.0]
    census = Census(clock=lambda: now[0])
    before = len(fake.routes())
    for i, inst in enumerate(machines):  # groups on both pages come from the listing
        assert census.status("salad", provider, inst, f"r{i}", 5.0).state == "FAILED"
    assert _calls(fake, before) == (2, 0)
    first, last = machines[0], machines[-1]
    with fake.cloud.lock:
        del fake.cloud.groups[last.instance_id]
    now[0] += 5.0
    before = len(fake.routes())
    # two pages are not one answer: a group made or deleted between them could have moved
    # one out of sight, so the group they lack is asked for alone
    assert census.status("salad", provider, last, "r129", 5.0).state == "TERMINATED"
    assert _calls(fake, before) == (2, 1) and census.gone_from_listing == 0
    fake.fail(LIST, 500, times=10)  # past the client's retries
    now[0] += 5.0
    listings = census.listings
    st = census.status("salad", provider, first, "r0", 5.0)
    assert census.listings == listings + 1  # it was tried, failed, and the look fell back
    assert st == provider.status(first) and st.state == InstanceState.FAILED
    assert census.gone_from_listing == 0


def test_many_runs_looks_cost_one_listing_not_a_request_each(make_provider, fake):
    machines = _groups(fake, 20, running=False)
    census = Census(clock=lambda: 0.0)
    provider: SaladProvider = make_provider()
    before = len(fake.routes())
    for i, inst in enumerate(machines):
        census.status("salad", provider, inst, f"r{i}", 5.0)
    assert _calls(fake, before) == (1, 0)
    alone = make_provider(list_cache_s=0)  # no shared listing: each look asks on its own
    before = len(fake.routes())
    for inst in machines:
        alone.status(inst)
    assert sum(_calls(fake, before)) == 20
