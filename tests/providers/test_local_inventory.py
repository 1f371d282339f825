"""Offer and allocation rules of the local provider, without processes."""

from __future__ import annotations

import pytest

from corral.errors import InfeasibleRequest, NoCapacity
from corral.gpu import parse_fake
from corral.providers.base import Requirements
from corral.providers.local import inventory
from corral.providers.local.inventory import Machine


def machine(spec: str, cpus: int = 8, memory_gb: float = 64.0, disk_gb: float = 500.0):
    return Machine(gpus=parse_fake(spec), cpus=cpus, memory_gb=memory_gb, disk_gb=disk_gb)


def req(lo: int, hi: int | None = None, gpu_type: str | None = None, **kw) -> Requirements:
    return Requirements(
        gpu_count_min=lo, gpu_count_max=lo if hi is None else hi, gpu_type=gpu_type, **kw
    )


@pytest.mark.parametrize(
    ("spec", "r", "gpu_type", "count"),
    [
        ("L40S:4", req(1, 8), "L40S", 4),
        ("L40S:4", req(2, 2), "L40S", 2),
        ("L40S:4", req(3, 0), "L40S", 3),  # max below min: min wins
        ("L40S:2,A100:8", req(4), "A100", 4),  # first model with enough GPUs
        ("L40S:2,A100:8", req(1, 1, "l40s"), "L40S", 1),
        ("L40S:2", req(0, 0), None, 0),
        ("", req(0, 2), None, 0),
    ],
)
def test_offers_pick_a_model_and_clip_the_count(spec, r, gpu_type, count):
    m = machine(spec)
    chosen = inventory.check_feasible(m, r)
    assert chosen == gpu_type
    assert inventory.offer_count(m, r, chosen) == count


@pytest.mark.parametrize(
    ("r", "message"),
    [
        (
            req(3, gpu_type="L40S"),
            "this machine has 2 L40S GPUs (L40S x2, A100 x1); the job asks for 3",
        ),
        (req(4), "this machine has 2 GPUs (L40S x2, A100 x1); the job asks for 4"),
        (req(1, gpu_type="H100"), "the job asks for H100 GPUs; this machine has L40S, A100"),
        (req(0, cpus=16), "the job asks for 16 CPUs; this machine has 8"),
        (req(0, memory_gb=128), "the job asks for 128 GB of memory; this machine has 64 GB"),
        (req(0, disk_gb=1000), "the job asks for 1000 GB of disk; this machine has 500 GB"),
        (req(0, spot=True), "the local provider has no spot machines"),
    ],
)
def test_requests_beyond_the_machine_are_infeasible_with_a_clear_message(r, message):
    with pytest.raises(InfeasibleRequest) as err:
        inventory.check_feasible(machine("L40S:2,A100:1"), r)
    assert str(err.value) == message


def test_allocation_takes_free_gpus_of_the_type_lowest_first():
    gpus = parse_fake("L40S:2,A100:3")
    assert inventory.allocate(gpus, "A100", 2, held={"2"}) == ["3", "4"]
    assert inventory.allocate(gpus, None, 0, held=set()) == []


def test_allocation_without_enough_free_gpus_is_no_capacity_with_counts():
    gpus = parse_fake("L40S:4")
    with pytest.raises(NoCapacity) as err:
        inventory.allocate(gpus, "L40S", 2, held={"0", "1", "2"})
    assert str(err.value) == "waiting for 2 GPUs: 3 of 4 are held by other runs"
    assert err.value.retryable
    with pytest.raises(InfeasibleRequest):
        inventory.allocate(gpus, "L40S", 5, held=set())
