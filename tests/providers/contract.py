"""The provider contract: behaviours every provider must have, reusable by each provider's tests.

Use it from a provider's test module::

    from .contract import ProviderContract

    class TestFakeProviderContract(ProviderContract):
        @pytest.fixture
        def provider(self, tmp_path):
            return FakeProvider(...)

Fixtures a subclass must or may override:

* ``provider`` (required): a fresh provider.
* ``requirements``: a :class:`Requirements` the provider can satisfy (default: no GPU).
* ``make_bootstrap``: ``key -> Bootstrap`` for a trivial plan that keeps running until it is
  terminated (default: one stage ``sleep 60`` in a temporary workdir).

Hooks (methods) a subclass may override:

* ``advance(provider)``: let time pass between two ``status`` polls (default: sleep 50 ms; a
  provider on a fake clock ticks it instead).
* ``fabricate_instance(provider, offer)``: an :class:`Instance` this provider never launched.
* ``running_timeout``: seconds to wait for RUNNING (and for a terminate to complete).
* ``running_has_endpoint``: whether RUNNING comes with the agent's endpoint (default True).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.control.census import Census
from corral.errors import NotYetTerminated
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    Offer,
    Provider,
    Requirements,
)
from corral.wire.code import BundleRef, CodePlan
from corral.wire.plan import AgentPlan, StagePlan
from support.waiting import wait_until


def trivial_plan(workdir: Path, key: str, run: str = "sleep 60") -> AgentPlan:
    """One stage that runs ``run`` in ``workdir``; state and checkpoints under ``workdir``."""
    return AgentPlan(
        run_id=key.rsplit("-a", 1)[0],
        attempt=1,
        workdir=str(workdir),
        stages=[StagePlan(name="train", run=run)],
        checkpoint_dir=str(workdir / "checkpoints"),
        state_dir=str(workdir / "state" / key),
        grace_seconds=1.0,
    )


def provider_plan(
    provider: Provider, offer: Offer, workdir: Path, key: str, run: str = "sleep 60", **spec: Any
) -> AgentPlan:
    """The plan the controller would build for ``key`` on ``offer``: a one-stage job spec
    (``spec`` adds keys) and ``provider``'s node contribution, through the real plan builder."""
    from corral.control.plan_builder import build_plan
    from corral.spec import JobSpec

    job = JobSpec.model_validate({"name": "t", "workdir": str(workdir), "run": run, **spec})
    run_id = key.rsplit("-a", 1)[0]
    profile = provider.node_profile(offer, run_id)
    code = shipped_code(workdir) if profile.workdir else None
    return build_plan(job, run_id=run_id, attempt=1, offer=offer, profile=profile, code=code)


def shipped_code(workdir: Path) -> CodePlan:
    """What the controller ships of ``workdir`` to a machine of its own: the packed workdir,
    put in a "bucket" (a directory beside it) for the machine's agent to fetch."""
    import shutil

    from corral.bundle import pack as packing

    bundle = packing.pack(workdir.parent / ".bundles", packing.collect(str(workdir)))
    bucket = workdir.parent / ".bucket"
    bucket.mkdir(exist_ok=True)
    shutil.copy(bundle.path, bucket / bundle.path.name)
    ref = BundleRef(
        sha256=bundle.sha256, size=bundle.size, storage=f"file://{bucket / bundle.path.name}"
    )
    return CodePlan(bundle=ref)


def new_key() -> str:
    return f"r{uuid.uuid4().hex[:10]}-a1"


def wait_state(provider: Provider, instance: Instance, state: InstanceState) -> InstanceStatus:
    """Poll ``provider.status(instance)`` until the instance is in ``state``; that status."""
    return wait_until(
        lambda: (st := provider.status(instance)).state == state and st, message=str(state)
    )


class ProviderContract:
    running_timeout: float = 30.0
    running_has_endpoint: bool = True

    # --- fixtures a provider's test module provides ---------------------------------------

    @pytest.fixture
    def provider(self) -> Provider:
        raise NotImplementedError("a provider's contract test class must define `provider`")

    @pytest.fixture
    def requirements(self) -> Requirements:
        return Requirements()

    @pytest.fixture
    def make_bootstrap(self, tmp_path: Path) -> Callable[[str], Bootstrap]:
        def make(key: str) -> Bootstrap:
            plan = trivial_plan(tmp_path, key)
            return Bootstrap(plan=plan.model_dump(mode="json"), token="t-" + uuid.uuid4().hex)

        return make

    # --- hooks ------------------------------------------------------------------------------

    def advance(self, provider: Provider) -> None:
        time.sleep(0.05)

    def fabricate_instance(self, provider: Provider, offer: Offer) -> Instance:
        return Instance(
            provider=provider.name,
            instance_id="never-launched-" + uuid.uuid4().hex[:8],
            key=new_key(),
            offer=offer,
        )

    # --- helpers ----------------------------------------------------------------------------

    @pytest.fixture
    def launched(self, provider: Provider) -> Iterator[list[Instance]]:
        """Instances a test launched; every one is terminated when the test ends."""
        instances: list[Instance] = []
        yield instances
        for inst in instances:
            with contextlib.suppress(Exception):  # teardown must reach every instance
                self.terminate(provider, inst)

    def first_offer(self, provider: Provider, requirements: Requirements) -> Offer:
        offers = provider.offers(requirements)
        assert offers, f"{provider.name} gave no offer for {requirements}"
        return offers[0]

    def check_status(self, provider: Provider, instance: Instance) -> InstanceStatus:
        st = provider.status(instance)
        assert isinstance(st, InstanceStatus)
        assert isinstance(st.state, InstanceState) and st.state in set(InstanceState)
        return st

    def wait_for(
        self, provider: Provider, instance: Instance, states: set[InstanceState]
    ) -> InstanceStatus:
        deadline = time.monotonic() + self.running_timeout
        seen = []
        while True:
            st = self.check_status(provider, instance)
            seen.append(st.state)
            if st.state in states:
                return st
            assert not st.state.gone, f"instance ended while waiting: {st.state} {st.detail}"
            assert time.monotonic() < deadline, f"no {states} after {seen[-5:]}"
            self.advance(provider)

    def terminate(self, provider: Provider, instance: Instance) -> None:
        """``terminate``, called again while the provider says :class:`NotYetTerminated`."""
        deadline = time.monotonic() + self.running_timeout
        while True:
            try:
                provider.terminate(instance)
                return
            except NotYetTerminated:
                assert time.monotonic() < deadline, "terminate never completed"
                self.advance(provider)

    # --- the contract -----------------------------------------------------------------------

    def test_offers_have_prices_and_required_fields(
        self, provider: Provider, requirements: Requirements
    ) -> None:
        offers = provider.offers(requirements)
        assert offers
        for offer in offers:
            assert offer.provider == provider.name
            assert offer.offer_id
            assert offer.region
            assert offer.price_per_hour >= 0
            assert offer.gpu_count >= requirements.gpu_count_min
            assert offer.availability in {"high", "low", "none", "unknown"}
            if requirements.gpu_count_min > 0:
                assert offer.gpu_type

    def test_offers_launch_nothing(self, provider: Provider, requirements: Requirements) -> None:
        before = len(provider.list_instances())
        provider.offers(requirements)
        provider.offers(requirements)
        assert len(provider.list_instances()) == before

    def test_offers_for_other_providers_only_are_empty(
        self, provider: Provider, requirements: Requirements
    ) -> None:
        req = requirements.model_copy(update={"providers": ["no-such-provider"]})
        assert provider.offers(req) == []

    def test_launch_twice_with_same_key_returns_same_instance(
        self, provider, requirements, make_bootstrap, launched
    ) -> None:
        offer = self.first_offer(provider, requirements)
        key = new_key()
        before = len(provider.list_instances())
        first = provider.launch(offer, make_bootstrap(key), key)
        launched.append(first)
        second = provider.launch(offer, make_bootstrap(key), key)
        assert second.instance_id == first.instance_id
        assert second.key == first.key == key
        assert second.provider == provider.name
        assert len(provider.list_instances()) == before + 1
        found = provider.find(key)
        assert found is not None and found.instance_id == first.instance_id

    def test_status_moves_to_running_with_an_endpoint(
        self, provider, requirements, make_bootstrap, launched
    ) -> None:
        offer = self.first_offer(provider, requirements)
        key = new_key()
        inst = provider.launch(offer, make_bootstrap(key), key)
        launched.append(inst)
        st = self.wait_for(provider, inst, {InstanceState.RUNNING})
        if self.running_has_endpoint:
            assert st.endpoint and st.endpoint.startswith(("http://", "https://"))

    def test_terminate_twice_leaves_it_terminated(
        self, provider, requirements, make_bootstrap, launched
    ) -> None:
        offer = self.first_offer(provider, requirements)
        key = new_key()
        inst = provider.launch(offer, make_bootstrap(key), key)
        launched.append(inst)
        self.wait_for(provider, inst, {InstanceState.RUNNING})
        self.terminate(provider, inst)
        self.terminate(provider, inst)
        assert self.check_status(provider, inst).state == InstanceState.TERMINATED
        found = provider.find(key)
        assert found is None or provider.status(found).state == InstanceState.TERMINATED
        for listed in provider.list_instances():  # a provider may list it until it is gone
            if listed.instance_id == inst.instance_id:
                assert self.check_status(provider, listed).state.gone

    def test_terminate_right_after_launch_is_fine(
        self, provider, requirements, make_bootstrap, launched
    ) -> None:
        offer = self.first_offer(provider, requirements)
        key = new_key()
        inst = provider.launch(offer, make_bootstrap(key), key)
        launched.append(inst)
        self.terminate(provider, inst)
        assert self.check_status(provider, inst).state == InstanceState.TERMINATED

    def test_never_launched_instance_is_terminated_and_terminate_is_a_no_op(
        self, provider: Provider, requirements: Requirements
    ) -> None:
        ghost = self.fabricate_instance(provider, self.first_offer(provider, requirements))
        assert self.check_status(provider, ghost).state == InstanceState.TERMINATED
        provider.terminate(ghost)  # a missing instance is terminated at once
        assert self.check_status(provider, ghost).state == InstanceState.TERMINATED

    def test_find_of_unknown_key_is_none(self, provider: Provider) -> None:
        assert provider.find(new_key()) is None

    def test_every_unsupported_capability_has_a_reason(self, provider: Provider) -> None:
        for cap in type(provider).capabilities():
            if not cap.supported:
                assert cap.reason and cap.reason != "not implemented", cap.name


def check_listing_agrees_with_status(
    census: Census,
    provider: Provider,
    machines: list[Instance],
    requests: Callable[[], tuple[int, int]],
    expected: list[InstanceState],
) -> None:
    """The census's look at each of ``machines`` (runs ``r0``, ``r1``...) costs one listing
    and no machine asked alone (``requests()``: (listings, single reads) since the looks
    began), gives each the state ``provider.status`` gives it (``expected``, in order), and
    exactly one of them is gone from the listing."""
    listed = [
        census.status(provider.name, provider, m, f"r{i}", 5.0) for i, m in enumerate(machines)
    ]
    assert requests() == (1, 0)
    alone = [provider.status(m) for m in machines]
    assert listed == alone
    assert [st.state for st in listed] == expected
    assert census.gone_from_listing == 1
