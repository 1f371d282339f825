"""The census (control.census): the machines of belled runs from one listing per provider,
not one status each; a listing that shows a machine changed makes its run due at once."""

from __future__ import annotations

from pathlib import Path

from corral.control import transitions
from corral.control.census import Census
from corral.control.observe import Observation
from corral.control.transitions import AskStop, Transition
from corral.control.watchers.preemption import PreemptionWatcher
from corral.errors import ProviderError
from corral.providers.base import Instance, InstanceState, InstanceStatus
from corral.providers.listing import StatusListing, SupportsStatusListing
from corral.store.states import RunState
from corral.wire.outcome import StopCause

from .helpers import submit, write_spec
from .unitkit import ENDPOINT, OFFER, Rig, StubProvider, rig


class ListingProvider(StubProvider, SupportsStatusListing):
    """A stub whose machines are listed in one call: counts the listings and the statuses."""

    def __init__(self) -> None:
        super().__init__()
        self.machines: dict[str, InstanceState] = {}
        self.listings = 0
        #: whether a listing says it holds every machine
        self.complete = True

    def statuses(self) -> StatusListing[InstanceState]:
        self.listings += 1
        return StatusListing(
            dict(self.machines), _read, complete=self.complete, id_of=lambda inst: inst.key
        )


def _read(instance: Instance, state: InstanceState | None) -> InstanceStatus:
    if state is None:  # what the stub's status says of a machine it does not know
        return InstanceStatus(state=InstanceState.TERMINATED, detail="no such machine")
    return InstanceStatus(state=state, endpoint=ENDPOINT)


def _machine(key: str) -> Instance:
    return Instance(provider="stub", instance_id=f"i-{key}", key=key, offer=OFFER)


def test_many_belled_runs_machines_come_from_one_listing_per_interval() -> None:
    now = [0.0]
    changed: list[str] = []
    census = Census(clock=lambda: now[0], on_change=changed.extend)
    provider = ListingProvider()
    provider.machines = {f"k{i}": InstanceState.RUNNING for i in range(500)}
    for i in range(500):  # every run's look within the listing's age: one listing for all
        st = census.status("stub", provider, _machine(f"k{i}"), f"r{i}", 5.0)
        assert st.state == InstanceState.RUNNING
        now[0] += 0.009
    assert (provider.listings, provider.status_calls) == (1, 0)
    # a machine launched since the listing is asked for alone (the listing is not retaken)
    assert census.status("stub", provider, _machine("new"), "rn", 5.0).state == "RUNNING"
    assert (provider.listings, provider.status_calls) == (1, 1)
    # the next listing, once the last is older than its age, shows two machines changed:
    # their runs are due now, each told once
    provider.machines["k7"] = InstanceState.PREEMPTED
    del provider.machines["k9"]
    now[0] += 5.0
    census.status("stub", provider, _machine("k1"), "r1", 5.0)
    assert provider.listings == 2 and sorted(changed) == ["r7", "r9"]
    now[0] += 5.0
    census.status("stub", provider, _machine("k1"), "r1", 5.0)
    assert provider.listings == 3 and sorted(changed) == ["r7", "r9"]
    # a run forgotten (over) is not compared any more
    census.forget("r3")
    provider.machines["k3"] = InstanceState.TERMINATED
    now[0] += 5.0
    census.status("stub", provider, _machine("k1"), "r1", 5.0)
    assert sorted(changed) == ["r7", "r9"]


def test_a_failed_listing_falls_back_to_each_machines_status_and_is_not_retaken_by_every_look() -> (
    None
):
    now = [0.0]
    census = Census(clock=lambda: now[0])
    provider = ListingProvider()
    provider.machines = {"k1": InstanceState.RUNNING}
    assert census.status("stub", provider, _machine("k1"), "r1", 5.0).state == "RUNNING"
    broken = ProviderError("the listing API answered 503")
    real = provider.statuses
    provider.statuses = lambda: (_ for _ in ()).throw(broken)  # type: ignore[method-assign]
    del provider.machines["k1"]
    now[0] += 5.0
    for _ in range(50):  # never gone for a listing that failed: asked alone, once an age
        assert census.status("stub", provider, _machine("k1"), "r1", 5.0).state == "RUNNING"
        now[0] += 0.1
    assert census.listings == 2 and provider.status_calls == 1
    provider.statuses = real  # type: ignore[method-assign]
    now[0] += 5.0  # retaken once as old as a listing may be: k1 is gone from it
    assert census.status("stub", provider, _machine("k1"), "r1", 5.0).state == "TERMINATED"
    assert census.listings == 3 and provider.status_calls == 1


def test_a_machine_gone_from_a_complete_listing_is_gone_without_a_request_of_its_own() -> None:
    now = [0.0]
    census = Census(clock=lambda: now[0])
    provider = ListingProvider()
    provider.machines = {f"k{i}": InstanceState.RUNNING for i in range(3)}
    for i in range(3):
        census.status("stub", provider, _machine(f"k{i}"), f"r{i}", 5.0)
    del provider.machines["k0"], provider.machines["k1"]
    provider.machines["k3"] = InstanceState.RUNNING
    now[0] += 5.0
    st = census.status("stub", provider, _machine("k0"), "r0", 5.0)
    assert (st.state, st.detail) == (InstanceState.TERMINATED, "no such machine")
    assert provider.status_calls == 0 and census.gone_from_listing == 1
    # a machine no listing held yet (launched since, or not visible yet) is asked alone
    assert census.status("stub", provider, _machine("k4"), "r4", 5.0).state == "RUNNING"
    assert provider.status_calls == 1
    # a partial listing proves nothing: k1, held before, is asked alone, never gone
    provider.complete = False
    now[0] += 5.0
    assert census.status("stub", provider, _machine("k1"), "r1", 5.0).state == "RUNNING"
    assert provider.status_calls == 2 and census.gone_from_listing == 1


def test_a_provider_that_cannot_list_is_asked_for_each_machine() -> None:
    census = Census()
    provider = StubProvider()
    for i in range(3):
        census.status("stub", provider, _machine(f"k{i}"), f"r{i}", 5.0)
    assert provider.status_calls == 3 and not census.lists(provider)


class _Belled:
    """The controller's bell as the watchers see it: every run rings."""

    def belled(self, run_id: str, attempt: int | None) -> bool:
        return True

    def header(self) -> str:
        return "127.0.0.1:9"


def _belled_rig(tmp_path: Path, **kw: str) -> tuple[Rig, ListingProvider]:
    r = rig(tmp_path, **kw)
    provider = ListingProvider()
    r.ctx.providers["stub"] = provider
    r.ctx.bell = _Belled()
    key = r.store.resources(run_id=r.run_id)[0].key
    provider.machines[key] = InstanceState.RUNNING
    return r, provider


def _check(r: Rig) -> object:
    run = r.run()
    return PreemptionWatcher().check(r.ctx, run, r.ctx.spec(run), Observation(r.ctx, run))


def test_a_belled_runs_preemption_notice_in_the_listing_asks_for_a_graceful_stop(
    tmp_path: Path,
) -> None:
    r, provider = _belled_rig(tmp_path)
    for _ in range(3):  # each look reads the machine from the one listing
        assert _check(r) is None
        r.clock.advance(1)
    assert (provider.listings, provider.status_calls) == (1, 0)
    provider.machines = dict.fromkeys(provider.machines, InstanceState.PREEMPTED)
    r.ctx.census.clock = lambda: 1e9  # the listing is old: the next look takes another
    step = _check(r)
    assert isinstance(step, AskStop) and step.cause == StopCause.PREEMPTION
    transitions.apply(r.ctx, r.run(), step)
    assert r.agent.stops == [(StopCause.PREEMPTION, step.reason)]
    assert provider.status_calls == 0


def test_a_belled_runs_machine_gone_from_the_listing_loses_the_attempt(tmp_path: Path) -> None:
    r, provider = _belled_rig(tmp_path, spec_extra="recovery: {max_error_restarts: 1}\n")
    provider.machines = dict.fromkeys(provider.machines, InstanceState.FAILED)
    step = _check(r)
    assert isinstance(step, Transition) and step.target == RunState.RECOVERING
    assert provider.status_calls == 0


def _more_runs(r: Rig, provider: StubProvider, n: int) -> list[str]:
    """``n`` more RUNNING runs on the rig's store and provider, each on its own machine."""
    spec = write_spec(r.ctx.home, "name: more\nrun: echo hi\n", "more.yaml")
    ids = []
    for _ in range(n):
        run_id = submit(spec)
        r.store.transition(run_id, RunState.PROVISIONING, "claimed", attempt=1, provider="stub")
        r.store.create_attempt(
            run_id, 1, provider="stub", offer=OFFER.model_dump(mode="json"), price_per_hour=0.0
        )
        key = f"{run_id}-a1"
        r.store.record_intent(run_id=run_id, attempt=1, provider="stub", key=key)
        inst = Instance(provider="stub", instance_id=key, key=key, offer=OFFER, endpoint=ENDPOINT)
        r.store.update_resource(
            key, state="active", instance_id=key, instance=inst.model_dump(mode="json")
        )
        r.store.transition(run_id, RunState.RUNNING, "agent ready")
        if isinstance(provider, ListingProvider):
            provider.machines[key] = InstanceState.RUNNING
        ids.append(run_id)
    return ids


def test_the_looks_at_many_belled_runs_ask_the_provider_once(tmp_path: Path) -> None:
    """Twenty belled runs looked at within a listing's age: one listing, no status; the same
    runs on a provider that cannot list: a status each (their first check)."""
    r, provider = _belled_rig(tmp_path)
    ids = [r.run_id, *_more_runs(r, provider, 19)]
    for run_id in ids:
        run = r.store.get_run(run_id)
        obs = Observation(r.ctx, run)
        assert PreemptionWatcher().check(r.ctx, run, r.ctx.spec(run), obs) is None
        assert obs.machine().state == InstanceState.RUNNING
    assert (provider.listings, provider.status_calls) == (1, 0)
    plain = StubProvider()
    r.ctx.providers["stub"] = plain
    r.ctx.run_notes.clear()  # a new controller: every machine is checked at its first look
    for run_id in ids:
        run = r.store.get_run(run_id)
        assert (
            PreemptionWatcher().check(r.ctx, run, r.ctx.spec(run), Observation(r.ctx, run)) is None
        )
    assert plain.status_calls == 20
