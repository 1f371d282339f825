"""The controller's census on IO.net: every deployment of the account from one listing
(``GET …/deployments``, paged, checked against the published document by the fake), read by
the mapping ``status()`` uses; a deployment gone from a listing whose pages agree is gone
without a request of its own; a listing whose pages disagree, or one that failed, proves no
deployment gone."""

from __future__ import annotations

import uuid
from typing import Any

from corral.control.census import Census
from corral.providers.base import Instance, InstanceState, Offer
from corral.providers.ionet.bootstrap import ENV_KEY, deployment_name

from ..contract import check_listing_agrees_with_status, new_key
from .fake_server import Dep, FakeIonet, Worker

OFFER = Offer(provider="ionet", offer_id="ionet-test", region="DE", gpu_count=1)


class _Up:
    """A container that runs (no process: the tests read states only)."""

    def running(self) -> bool:
        return True

    def kill(self) -> None:
        """Nothing runs: nothing to stop."""


def _deployments(fake: FakeIonet, n: int, status: str = "deployment requested") -> list[Instance]:
    """``n`` deployments made at the fake directly, as corral's records of them."""
    out = []
    for _ in range(n):
        key = new_key()
        body: dict[str, Any] = {
            "resource_private_name": deployment_name(key),
            "gpus_per_container": 1,
            "hardware_id": 7,
            "location_ids": [9],
            "container_config": {"env_variables": {ENV_KEY: key}},
        }
        dep = Dep(id=str(uuid.uuid4()), name=deployment_name(key), body=body, paid_minutes=600.0)
        dep.status = status
        if status == "running":
            dep.worker = Worker(uuid.uuid4().hex[:12], str(uuid.uuid4()), _Up())  # type: ignore[arg-type]
        with fake.lock:
            fake.deps[dep.id] = dep
        out.append(Instance(provider="ionet", instance_id=dep.id, key=key, offer=OFFER))
    return out


def _calls(fake: FakeIonet, before: int) -> tuple[int, int]:
    """(list pages, single deployment reads) since ``before``."""
    routes = fake.routes()[before:]
    pages = sum(r == "GET /deployments" for r in routes)
    alone = sum(r.startswith("GET /deployment/") and r.count("/") == 2 for r in routes)
    return pages, alone


def test_the_listing_gives_each_deployment_the_state_status_gives(make_provider, fake):
    provider = make_provider(list_cache_s=30.0)
    running, completed, failed, gone = _deployments(fake, 4, "running")
    now = [0.0]
    census = Census(clock=lambda: now[0])
    machines = [running, completed, failed, gone]
    for i, inst in enumerate(machines):  # the first listing: each runs in its first container
        assert census.status("ionet", provider, inst, f"r{i}", 5.0).state == "RUNNING"
    with fake.lock:
        fake.deps[completed.instance_id].status = "completed"  # its prepaid hours ran out
        fake.deps[failed.instance_id].status = "failed"
        del fake.deps[gone.instance_id]  # IO.net does not know it (a 404)
    now[0] += 5.0
    before = len(fake.routes())
    check_listing_agrees_with_status(
        census,
        provider,
        machines,
        lambda: _calls(fake, before),
        [
            InstanceState.RUNNING,
            InstanceState.PREEMPTED,
            InstanceState.FAILED,
            InstanceState.TERMINATED,
        ],
    )


def test_pages_that_agree_prove_a_deployment_gone_and_a_failed_listing_never(make_provider, fake):
    provider = make_provider(list_cache_s=30.0)
    machines = _deployments(fake, 130)
    now = [0.0]
    census = Census(clock=lambda: now[0])
    before = len(fake.routes())
    for i, inst in enumerate(machines):  # both pages read, every deployment from them
        assert census.status("ionet", provider, inst, f"r{i}", 5.0).state == "PROVISIONING"
    assert _calls(fake, before) == (2, 0)
    first, last = machines[0], machines[-1]
    with fake.lock:
        del fake.deps[last.instance_id]
    now[0] += 5.0
    before = len(fake.routes())
    assert census.status("ionet", provider, last, "r129", 5.0).state == "TERMINATED"
    assert _calls(fake, before) == (2, 0) and census.gone_from_listing == 1
    fake.fail("GET /deployments", 500, times=10)  # past the client's retries
    with fake.lock:
        del fake.deps[first.instance_id]
    now[0] += 5.0
    listings = census.listings
    st = census.status("ionet", provider, first, "r0", 5.0)
    assert census.listings == listings + 1  # tried, failed: the look asked on its own
    assert st == provider.status(first) and census.gone_from_listing == 1


def test_pages_that_disagree_on_total_make_a_partial_listing(make_provider, fake, monkeypatch):
    provider = make_provider(list_cache_s=30.0)
    machines = _deployments(fake, 130)
    now = [0.0]
    census = Census(clock=lambda: now[0])
    last = machines[-1]
    assert census.status("ionet", provider, last, "r1", 5.0).state == "PROVISIONING"
    real = fake.api

    def deploy_between_pages(method: str, path: str, query: Any, body: Any) -> Any:
        answer = real(method, path, query, body)
        if path == "/deployments" and query.get("page") == ["0"]:
            _deployments(fake, 1)  # made after the first page was answered
        return answer

    monkeypatch.setattr(fake, "api", deploy_between_pages)
    with fake.lock:
        del fake.deps[last.instance_id]
    now[0] += 5.0
    before = len(fake.routes())
    # the pages' totals differ: what they lack proves nothing, so it is asked alone
    assert census.status("ionet", provider, last, "r1", 5.0).state == "TERMINATED"
    assert _calls(fake, before) == (2, 1) and census.gone_from_listing == 0
    assert not provider.statuses().complete


def test_many_runs_looks_cost_one_listing_not_a_request_each(make_provider, fake):
    machines = _deployments(fake, 20)
    census = Census(clock=lambda: 0.0)
    provider = make_provider(list_cache_s=30.0)
    before = len(fake.routes())
    for i, inst in enumerate(machines):
        census.status("ionet", provider, inst, f"r{i}", 5.0)
    assert _calls(fake, before) == (1, 0)
    alone = make_provider(list_cache_s=0)  # no shared listing: each look asks on its own
    before = len(fake.routes())
    for inst in machines:
        alone.status(inst)
    assert sum(_calls(fake, before)) == 20
