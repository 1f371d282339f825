"""Who can host a gang: a multi-node job (``resources.nodes`` > 1) is planned only on providers
that say they can give one job that many connected machines (``SupportsGangs``); the others
are rows with their reason, as infeasible offers are. A provider that could host one but where
corral does not launch gangs yet is refused with one line saying so: never a multi-node job on
one node. The fake cloud launches gangs: its offers are planned, available while it has as
many machines free as the gang asks."""

from __future__ import annotations

from typing import ClassVar

from corral.control import planner
from corral.providers.aws.provider import AwsProvider
from corral.providers.base import Requirements, SupportsGangs
from corral.providers.fake.provider import FakeProvider
from corral.providers.ionet.provider import IonetProvider
from corral.providers.local.provider import LocalProvider
from corral.providers.pool.provider import PoolProvider
from corral.providers.runpod.provider import RunPodProvider
from corral.providers.salad.provider import SaladProvider
from corral.spec import load_spec_text

from .cli import run, run_json
from .helpers import ListProvider, offer


class GangProvider(ListProvider, SupportsGangs):
    name: ClassVar[str] = "gang"
    max_nodes: ClassVar[int] = 4
    gang_form: ClassVar[str] = "one rack"


class LoneProvider(ListProvider):
    name: ClassVar[str] = "lone"
    unsupported: ClassVar[dict[str, str]] = {"SupportsGangs": "its boxes cannot see each other"}


def _providers() -> dict[str, ListProvider]:
    return {
        "gang": GangProvider([offer("gang", 1.0)]),
        "lone": LoneProvider([offer("lone", 0.5)]),
    }


def test_one_node_plans_as_before():
    providers = _providers()
    result = planner.plan(providers, Requirements(gpu_count_min=1, gpu_count_max=1))
    assert [o.provider for o in result.offers] == ["lone", "gang"] and not result.rejected


def test_a_gang_leaves_out_who_cannot_host_it_with_the_reason():
    providers = _providers()
    result = planner.plan(providers, Requirements(gpu_count_min=1, gpu_count_max=1, nodes=2))
    assert result.offers == []
    assert result.codes == {"lone": "unsupported", "gang": "not_available"}
    assert (
        result.rejected["lone"]
        == "cannot give one job 2 machines (its boxes cannot see each other)"
    )
    assert result.rejected["gang"] == (
        "multi-node launch is not available yet on gang (2 nodes asked; its gang: one rack; "
        "see docs/multinode.md)"
    )
    assert not providers["lone"].asked and not providers["gang"].asked  # never asked for offers


def test_more_nodes_than_a_provider_gives_one_job_is_named():
    result = planner.plan(_providers(), Requirements(nodes=5, providers=["gang"]))
    assert result.rejected == {
        "gang": "gives one job at most 4 machines, 5 asked (resources.nodes)",
        "lone": "not in resources.providers",
    }


def test_the_spec_s_nodes_reach_the_requirements():
    spec = load_spec_text("name: x\nresources: {nodes: 3}\nrun: x\n", source="c.yaml")
    assert planner.requirements_from_spec(spec).nodes == 3


def test_each_provider_says_whether_it_can_host_a_gang():
    gangs = {c: issubclass(c, SupportsGangs) for c in (AwsProvider, RunPodProvider, FakeProvider)}
    assert all(gangs.values()), gangs
    assert issubclass(PoolProvider, SupportsGangs)
    assert RunPodProvider.max_nodes == 250 and FakeProvider.max_nodes >= 4
    for lone in (SaladProvider, IonetProvider, LocalProvider):
        assert not issubclass(lone, SupportsGangs)
        caps = {c.name: c for c in lone.capabilities()}
        assert not caps["SupportsGangs"].supported and caps["SupportsGangs"].reason
    salad = {c.name: c for c in SaladProvider.capabilities()}["SupportsGangs"]
    assert "no networking between container instances" in salad.reason


def test_a_gang_provider_s_offers_are_available_only_with_room_for_the_whole_gang():
    cloud = {
        "launch_delay_s": 0,
        "offers": [
            {"id": "two", "region": "r1", "gpu_type": "A100", "gpu_count": 1, "cpus": 4,
             "memory_gb": 16, "on_demand_price": 1.0, "capacity": 2},
        ],
    }  # fmt: skip
    fake = FakeProvider(cloud)
    for nodes, free in ((2, True), (3, False)):
        req = Requirements(gpu_count_min=1, gpu_count_max=1, nodes=nodes, spot=False)
        (got,) = planner.plan({"fake": fake}, req).offers
        assert got.available is free
    assert got.details["unavailable_reason"] == (
        "fake/r1: 2 of 2 A100 x1 machines free, a gang of 3 asked"
    )


def test_corral_offers_nodes_shows_why_each_provider_cannot(cloud):
    data = run_json("offers", "--gpus", "A100:1", "--nodes", "2", "--provider", "local")
    assert data["offers"] == [] and data["query"]["nodes"] == 2
    rows = {p["provider"]: p for p in data["providers"]}
    assert rows["local"]["code"] == "unsupported"
    assert "cannot give one job 2 machines (this machine is one node" in rows["local"]["reason"]
    code, _, err = run("offers", "--nodes", "0")
    assert code != 0 and "--nodes 0: expected 1 or more machines" in err
