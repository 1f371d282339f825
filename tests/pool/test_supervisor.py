"""``corral worker``'s plan of workers (GPUs, groups, queues, names) and its GPU locks."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.device_locks import DeviceLocks
from corral.errors import BadInput, NoCapacity
from corral.gpu import parse_fake
from corral.queue.settings import PoolSettings
from corral.queue.supervisor import WorkerOptions, _locked, plan_slots

SETTINGS = PoolSettings(name="team")


def test_one_worker_per_gpu_pinned_and_queued_by_type_and_count(tmp_path: Path) -> None:
    gpus = parse_fake("L40S:2,A100:2")
    slots = plan_slots(gpus, WorkerOptions(name="box", home=tmp_path), SETTINGS)
    assert [(s.name, s.gpus, s.queue) for s in slots] == [
        ("box-gpu0", ["0"], "team.l40s.x1"),
        ("box-gpu1", ["1"], "team.l40s.x1"),
        ("box-gpu2", ["2"], "team.a100.x1"),
        ("box-gpu3", ["3"], "team.a100.x1"),
    ]
    assert slots[0].home == str(tmp_path / "box-gpu0")
    pairs = plan_slots(gpus, WorkerOptions(name="box", gpus_per_worker=2), SETTINGS)
    assert [(s.gpus, s.queue) for s in pairs] == [
        (["0", "1"], "team.l40s.x2"),
        (["2", "3"], "team.a100.x2"),
    ]
    chosen = plan_slots(gpus, WorkerOptions(name="box", gpus=["3"]), SETTINGS)
    assert [s.gpus for s in chosen] == [["3"]]
    lan = plan_slots(gpus, WorkerOptions(bind="127.0.0.1", advertise="10.0.0.7"), SETTINGS)
    assert {(s.bind_host, s.advertise_host) for s in lan} == {("127.0.0.1", "10.0.0.7")}
    # the host the workers stand for (a gang's nodes go to distinct hosts); the name's default
    hosted = plan_slots(gpus, WorkerOptions(host="rack7"), SETTINGS)
    assert {s.host for s in hosted} == {"rack7"} and hosted[0].name == "rack7-gpu0"


def test_bad_worker_options_are_one_line_errors() -> None:
    gpus = parse_fake("L40S:3")
    with pytest.raises(BadInput, match="no GPU 7 on this machine"):
        plan_slots(gpus, WorkerOptions(gpus=["7"]), SETTINGS)
    with pytest.raises(BadInput, match="do not split into groups of 2"):
        plan_slots(gpus, WorkerOptions(gpus_per_worker=2), SETTINGS)
    with pytest.raises(BadInput, match="CORRAL_FAKE_GPUS"):
        plan_slots([], WorkerOptions(), SETTINGS)
    with pytest.raises(BadInput, match=r"^--host 'a b': expected a host name without spaces$"):
        plan_slots(gpus, WorkerOptions(host="a b"), SETTINGS)


def test_a_gpu_served_twice_is_refused_naming_it(tmp_path: Path) -> None:
    locks = DeviceLocks(tmp_path, "fake")
    refused = pytest.raises(NoCapacity, match="GPU 0 is in use on this machine")
    with locks.hold(["0"]), refused, _locked(DeviceLocks(tmp_path, "fake"), ["1", "0"]):
        raise AssertionError("GPU 0 was served twice")
    with _locked(locks, ["0", "1"]):
        assert locks.busy() == {"0", "1"}
    assert locks.busy() == set()


def test_cpu_slots_serve_the_cpu_queue_and_share_the_box_by_weight(tmp_path: Path) -> None:
    from corral.queue.limits import usable_cores

    opts = WorkerOptions(name="box", home=tmp_path, cpu_slots=2, job_cpus=1.0, job_memory=2**30)
    slots = plan_slots(parse_fake("L40S:2"), opts, SETTINGS)
    assert [(s.name, s.gpus, s.gpu_type, s.queue) for s in slots] == [
        ("box-gpu0", ["0"], "L40S", "team.l40s.x1"),
        ("box-gpu1", ["1"], "L40S", "team.l40s.x1"),
        ("box-cpu0", [], "cpu", "team.cpu.x0"),
        ("box-cpu1", [], "cpu", "team.cpu.x0"),
    ]
    assert all(s.job_memory == 2**30 and s.job_cpus == 1.0 for s in slots)
    cores = usable_cores()
    share = max(1, len(cores) // 4)
    assert all(s.cpus == share for s in slots)
    assert [s.cores for s in slots] == [[cores[(i * share) % len(cores)]] for i in range(4)]
    # a box without GPUs serves CPU jobs alone; "share" is each worker's share of the box
    alone = plan_slots(
        [], WorkerOptions(cpu_slots=1, job_cpus="share", job_memory="share"), SETTINGS
    )
    [cpu] = alone
    assert cpu.job_cpus == float(cpu.cpus) == float(len(cores))
    assert cpu.job_memory == int(cpu.memory_gb * 2**30)
    assert cpu.cores == cores
    with pytest.raises(BadInput, match="no GPU found"):
        plan_slots([], WorkerOptions(), SETTINGS)
