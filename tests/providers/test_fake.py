"""The fake spot cloud: the provider contract, its market (offers, prices, capacity), launch
delay, scheduled and random preemptions on a fake clock, the notice before the kill, restart
safety, and one run recovered end to end by a real controller."""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from pathlib import Path

import psutil
import pytest

from corral.errors import (
    BadInput,
    Conflict,
    InfeasibleRequest,
    NoCapacity,
    NotFound,
    NotYetTerminated,
)
from corral.providers.base import (
    Bootstrap,
    InstanceState,
    Requirements,
    SupportsPreemptionNotice,
    SupportsSimulatedPreemption,
    SupportsSpot,
)
from corral.providers.common.node import NodeView
from corral.providers.fake import ENV_FAKE_CLOUD, FakeCloud, FakeProvider, preemption_at
from corral.providers.local import LocalProvider
from corral.providers.registry import get_provider
from support.waiting import wait_until

from .contract import ProviderContract, trivial_plan, wait_state


class Clock:
    """The provider's clock: time moves only when a test says so."""

    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


ONE_OFFER = {
    "id": "box",
    "region": "r1",
    "gpu_type": "L40S",
    "gpu_count": 1,
    "spot_price": 0.3,
    "on_demand_price": 0.9,
    "capacity": 2,
}


def cloud(**kw) -> dict:
    return {"offers": [ONE_OFFER], "launch_delay_s": 0.0, "notice_s": 10.0, **kw}


def bootstrap(workdir: Path, key: str, run: str = "sleep 60", grace: float = 1.0) -> Bootstrap:
    plan = trivial_plan(workdir, key, run).model_copy(update={"grace_seconds": grace})
    return Bootstrap(plan=plan.model_dump(mode="json"), token="tok-" + uuid.uuid4().hex)


def offer(p: FakeProvider, spot: bool = True):
    return next(o for o in p.offers(Requirements(spot=spot)) if o.available)


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def on_node(inst, path: Path) -> Path:
    """``path`` of the plan as it is on the fake machine of ``inst`` (its own root)."""
    return Path(inst.data["dir"]) / "machine" / "fs" / str(path).lstrip("/")


def stage_pids(inst) -> list[int]:
    """Pids of the stage process groups the machine's agent lists in children.json."""
    path = Path(inst.data["dir"]) / "machine" / "instances" / inst.key / "agent"
    try:
        entries = json.loads((path / "children.json").read_text())
    except (FileNotFoundError, ValueError):
        return []
    return [e["pgid"] for e in entries]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_fake(corral_home: Path, clock: Clock):
    """Fake providers on the test's CORRAL_HOME and the test's clock."""

    def make(spec: dict | None = None, **kw) -> FakeProvider:
        return FakeProvider(
            spec if spec is not None else cloud(), home=corral_home, clock=clock, **kw
        )

    return make


class TestFakeProviderContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_fake) -> FakeProvider:
        return make_fake(cloud(launch_delay_s=1.0))

    def advance(self, provider) -> None:
        provider.clock.advance(0.25)
        time.sleep(0.05)


# --- the market -------------------------------------------------------------------------------


def test_default_catalog_has_two_regions_two_gpu_types_and_spot_at_a_third(make_fake) -> None:
    p = make_fake({})
    offers = p.offers(Requirements())
    assert {o.region for o in offers} == {"us-east", "eu-west"}
    assert {o.gpu_type for o in offers} == {"L40S", "A100"}
    by_machine: dict[str, dict[bool, float]] = {}
    for o in offers:
        assert o.provider == "fake" and o.available and o.details["machine"]
        by_machine.setdefault(o.details["machine"], {})[o.spot] = o.price_per_hour
    for prices in by_machine.values():
        assert prices[True] == pytest.approx(prices[False] / 3, rel=0.01)
    assert [o.price_per_hour for o in offers] == sorted(o.price_per_hour for o in offers)


def test_offers_follow_gpu_type_count_spot_region_and_price_limits(make_fake) -> None:
    p = make_fake({})
    a100 = p.offers(Requirements(gpu_type="a100", gpu_count_min=8, gpu_count_max=8, spot=True))
    assert [(o.gpu_type, o.gpu_count, o.spot) for o in a100] == [("A100", 8, True)]
    eu = p.offers(Requirements(gpu_type="L40S", gpu_count_min=1, regions=["eu-west"], spot=False))
    assert [(o.region, o.spot, o.price_per_hour) for o in eu] == [("eu-west", False, 1.35)]
    cheap = p.offers(Requirements(max_hourly_price=0.5))
    assert cheap and all(o.price_per_hour <= 0.5 and o.spot for o in cheap)
    with pytest.raises(InfeasibleRequest, match=r"no machine that fits.*L40S x1"):
        p.offers(Requirements(gpu_type="H100", gpu_count_min=1))
    with pytest.raises(InfeasibleRequest, match="within the job's limits"):
        p.offers(Requirements(regions=["mars"]))


def test_capacity_runs_out_with_no_capacity_and_terminate_frees_it(make_fake, tmp_path) -> None:
    p = make_fake(cloud(launch_delay_s=600.0))  # machines never boot: no processes needed
    spot = offer(p)
    first = p.launch(spot, bootstrap(tmp_path, "ra-a1"), "ra-a1")
    p.launch(offer(p, spot=False), bootstrap(tmp_path, "rb-a1"), "rb-a1")  # same machines
    full = p.offers(Requirements())
    assert all(not o.available and o.availability == "none" for o in full)
    assert "all 2 L40S x1 machines are in use" in full[0].details["unavailable_reason"]
    with pytest.raises(NoCapacity, match="fake/r1: all 2 box machines are in use"):
        p.launch(spot, bootstrap(tmp_path, "rc-a1"), "rc-a1")
    assert p.find("rc-a1") is None
    p.terminate(first)
    third = p.launch(spot, bootstrap(tmp_path, "rc-a1"), "rc-a1")
    assert third.data["launch_index"] == 2 and p.status(third).state == InstanceState.PROVISIONING


def test_a_slow_teardown_is_confirmed_only_after_the_terminate_delay(
    make_fake, clock, tmp_path
) -> None:
    p = make_fake(cloud(terminate_delay_s=20.0))
    inst = p.launch(offer(p), bootstrap(tmp_path, "slow-a1"), "slow-a1")
    pid = inst.data["pid"]
    with pytest.raises(NotYetTerminated, match=r"teardown in progress \(20.0s left\)"):
        p.terminate(inst)
    assert not alive(pid)  # the processes are gone at once; the machine (and bill) is not
    clock.advance(15)
    with pytest.raises(NotYetTerminated, match=r"\(5.0s left\)"):
        p.terminate(inst)
    assert p.find("slow-a1").data["state"] != "terminated"
    clock.advance(5)
    p.terminate(inst)
    assert p.status(inst).state == InstanceState.TERMINATED


def test_an_offer_not_in_the_catalog_is_refused(make_fake, tmp_path) -> None:
    p = make_fake()
    bad = offer(p).model_copy(update={"offer_id": "nope:spot"})
    with pytest.raises(BadInput, match="not in the fake cloud's catalog"):
        p.launch(bad, bootstrap(tmp_path, "rz-a1"), "rz-a1")


# --- launch delay, notice, kill ---------------------------------------------------------------


def test_instance_boots_after_the_launch_delay_with_the_offer_gpus(make_fake, clock, tmp_path):
    p = make_fake(cloud(launch_delay_s=30.0))
    inst = p.launch(offer(p), bootstrap(tmp_path, "boot-a1"), "boot-a1")
    pending = Path(inst.data["dir"]) / "bootstrap.json"
    assert pending.stat().st_mode & 0o777 == 0o600  # holds the agent token until boot
    st = p.status(inst)
    assert st.state == InstanceState.PROVISIONING and "30.0s left" in st.detail
    assert inst.endpoint is None and inst.data["pid"] is None
    clock.advance(29.9)
    assert p.status(inst).state == InstanceState.PROVISIONING
    clock.advance(0.1)
    st = wait_state(p, inst, InstanceState.RUNNING)
    assert st.endpoint and st.endpoint.startswith("http://127.0.0.1:")
    assert not pending.exists()
    found = p.find("boot-a1")
    assert found.endpoint == st.endpoint and alive(found.data["pid"])
    argv = psutil.Process(found.data["pid"]).cmdline()  # the offer's one GPU, as on a cloud
    assert argv[argv.index("--devices") + 1] == "0"


def test_scheduled_preemption_hits_that_launch_with_sigterm_then_sigkill(
    make_fake, clock, tmp_path
) -> None:
    p = make_fake(cloud(preemptions=[{"launch": 1, "after_s": 30}], notice_s=10.0))
    spared = p.launch(offer(p), bootstrap(tmp_path, "s0-a1"), "s0-a1")
    # the stage ignores SIGTERM and the agent's grace is long: only the kill ends them
    run = "trap '' TERM; touch trap-set; sleep 60"
    hit = p.launch(offer(p), bootstrap(tmp_path, "s1-a1", run, grace=60.0), "s1-a1")
    wait_state(p, hit, InstanceState.RUNNING)
    agent = p.find("s1-a1").data["pid"]
    stages = wait_until(lambda: stage_pids(hit), message="the stage to start")
    wait_until(on_node(hit, tmp_path / "trap-set").exists, message="the stage's trap")
    clock.advance(29.9)
    assert p.status(hit).state == InstanceState.RUNNING
    clock.advance(0.1)
    st = p.status(hit)
    assert st.state == InstanceState.PREEMPTED
    assert "schedule" in st.detail and "notice at +30.0s" in st.detail
    events = Path(hit.data["dir"]) / "machine" / "instances" / "s1-a1" / "agent"
    wait_until(lambda: "stop.requested" in (events / "events.jsonl").read_text(), message="notice")
    time.sleep(0.3)
    assert alive(agent) and all(alive(pid) for pid in stages)  # noticed, not killed yet
    clock.advance(10.0)
    assert p.status(hit).state == InstanceState.PREEMPTED
    assert not alive(agent) and not any(alive(pid) for pid in stages)
    assert p.status(spared).state == InstanceState.RUNNING  # launch 0 is not scheduled
    p.terminate(hit)
    p.terminate(hit)
    assert p.status(hit).state == InstanceState.TERMINATED


def test_the_notice_lets_a_job_that_handles_sigterm_end_before_the_kill(
    make_fake, clock, tmp_path
) -> None:
    p = make_fake(cloud(preemptions=[{"key": "n-a1", "after_s": 5}], notice_s=30.0))
    run = "trap 'echo saved > saved.txt; exit 75' TERM; touch trap-set; sleep 60 & wait"
    inst = p.launch(offer(p), bootstrap(tmp_path, "n-a1", run, grace=20.0), "n-a1")
    wait_state(p, inst, InstanceState.RUNNING)
    agent = p.find("n-a1").data["pid"]
    wait_until(on_node(inst, tmp_path / "trap-set").exists, message="the stage's trap")
    clock.advance(5.0)
    assert p.status(inst).state == InstanceState.PREEMPTED
    wait_until(lambda: not alive(agent), message="the agent to stop on its own")
    assert on_node(inst, tmp_path / "saved.txt").read_text() == "saved\n"


def test_scheduled_preemptions_spare_on_demand_machines(make_fake, clock, tmp_path) -> None:
    schedule = [{"key": "sp-a1", "after_s": 5}, {"key": "od-a1", "after_s": 5}]
    p = make_fake(cloud(launch_delay_s=600.0, preemptions=schedule))
    spot = p.launch(offer(p), bootstrap(tmp_path, "sp-a1"), "sp-a1")
    od = p.launch(offer(p, spot=False), bootstrap(tmp_path, "od-a1"), "od-a1")
    clock.advance(5.0)
    st = p.status(spot)
    assert st.state == InstanceState.PREEMPTED  # while still booting: it never runs
    assert p.status(od).state == InstanceState.PROVISIONING
    clock.advance(600.0)
    assert p.status(spot).state == InstanceState.PREEMPTED
    assert p.find("sp-a1").data["pid"] is None
    assert not (Path(spot.data["dir"]) / "bootstrap.json").exists()


def test_random_preemptions_are_seeded_and_follow_the_scaled_rate() -> None:
    c = FakeCloud.model_validate({"rate_per_hour": 1.1, "time_scale": 60.0, "seed": 3})
    gaps = []
    for i in range(3000):
        at, why = preemption_at(c, key=f"k{i}", index=i, launched_at=100.0, spot=True)
        assert why == "random"
        gaps.append(at - 100.0)
    # 1.1 per simulated hour, 60 simulated seconds per clock second: mean 3600/66 s
    assert statistics.mean(gaps) == pytest.approx(3600 / 66, rel=0.06)
    again = [preemption_at(c, key="x", index=i, launched_at=100.0, spot=True) for i in range(5)]
    assert [a for a, _ in again] == [g + 100.0 for g in gaps[:5]]
    other = c.model_copy(update={"seed": 4})
    assert preemption_at(other, key="x", index=0, launched_at=100.0, spot=True)[0] != again[0][0]
    assert preemption_at(c, key="x", index=0, launched_at=0.0, spot=False) == (None, "")


def test_a_random_preemption_happens_when_the_clock_reaches_it(make_fake, clock, tmp_path):
    p = make_fake(cloud(launch_delay_s=1e6, rate_per_hour=1.1, time_scale=3600.0, seed=9))
    inst = p.launch(offer(p), bootstrap(tmp_path, "rnd-a1"), "rnd-a1")
    rec = json.loads((Path(inst.data["dir"]) / "instance.json").read_text())
    assert rec["preempt_cause"] == "random"
    assert rec["preempt_at"] > clock()
    clock.t = rec["preempt_at"] - 0.01
    assert p.status(inst).state == InstanceState.PROVISIONING
    clock.t = rec["preempt_at"]
    assert p.status(inst).state == InstanceState.PREEMPTED


def test_preempt_on_request_kills_after_the_grace_and_refuses_a_terminated_one(
    make_fake, clock, tmp_path
) -> None:
    p = make_fake()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, "man-a1"), "man-a1")
    wait_state(p, inst, InstanceState.RUNNING)
    agent = p.find("man-a1").data["pid"]
    p.preempt(inst, grace=0.0)
    st = p.status(inst)
    assert st.state == InstanceState.PREEMPTED and "manual" in st.detail
    assert not alive(agent)
    p.preempt(inst)  # already preempted: nothing more to do
    p.terminate(inst)
    with pytest.raises(Conflict, match="terminated"):
        p.preempt(inst)
    ghost = inst.model_copy(update={"instance_id": "fake-ghost"})
    with pytest.raises(NotFound):
        p.preempt(ghost)


def timer_procs(key: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "corral.providers.fake.timer" in cmd and key in cmd:
            out.append(proc)
    return out


def test_on_the_wall_clock_a_timer_boots_notices_and_kills_without_provider_calls(
    corral_home, tmp_path
) -> None:
    spec = cloud(launch_delay_s=0.3, notice_s=0.5, preemptions=[{"launch": 0, "after_s": 1.5}])
    p = FakeProvider(spec, home=corral_home)  # time.time: the market keeps its own time
    assert p.timers
    inst = p.launch(offer(p), bootstrap(tmp_path, "wall-a1"), "wall-a1")
    record = Path(inst.data["dir"]) / "instance.json"

    def state() -> str:
        return json.loads(record.read_text())["state"]

    assert state() == "provisioning" and timer_procs("wall-a1")
    wait_until(lambda: state() == "running", message="the boot")
    wait_until(lambda: state() in ("preempting", "preempted"), message="the notice")
    wait_until(lambda: state() == "preempted", message="the kill")
    rec = json.loads(record.read_text())
    assert rec["ended_at"] == pytest.approx(rec["launched_at"] + 2.0)
    assert not alive(p.find("wall-a1").data["pid"])
    wait_until(lambda: not timer_procs("wall-a1"), message="the timer to exit")


# --- restart safety, configuration, capabilities ----------------------------------------------


def test_a_new_provider_on_the_same_home_sees_and_boots_the_same_instances(
    make_fake, clock, tmp_path
) -> None:
    first = make_fake(cloud(launch_delay_s=5.0))
    inst = first.launch(offer(first), bootstrap(tmp_path, "rs-a1"), "rs-a1")
    del first  # the controller that launched it is gone
    second = make_fake(cloud(launch_delay_s=5.0))
    assert [i.instance_id for i in second.list_instances()] == [inst.instance_id]
    again = second.launch(offer(second), bootstrap(tmp_path, "rs-a1"), "rs-a1")
    assert again.instance_id == inst.instance_id
    clock.advance(5.0)
    wait_state(second, inst, InstanceState.RUNNING)  # booted from the saved bootstrap
    third = make_fake(cloud(launch_delay_s=5.0))
    third.terminate(inst)
    assert second.status(inst).state == InstanceState.TERMINATED
    assert (
        third.launch(offer(third), bootstrap(tmp_path, "rs2-a1"), "rs2-a1").data["launch_index"]
        == 1
    )


def test_the_cloud_comes_from_the_file_named_by_the_environment(
    corral_home, monkeypatch, tmp_path
) -> None:
    path = tmp_path / "cloud.yaml"
    path.write_text(
        "launch_delay_s: 3\nofferz: []\n"  # a typo'd key is an error, not ignored
    )
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(path))
    with pytest.raises(BadInput, match=r"cloud.yaml is invalid: offerz: Extra inputs"):
        get_provider("fake")
    path.write_text("launch_delay_s: 3\noffers:\n  - {id: a, region: x, gpu_type: T4}\n")
    with pytest.raises(BadInput, match="neither spot_price nor on_demand_price"):
        get_provider("fake")
    path.write_text(
        "launch_delay_s: 3\npreemptions: [{launch: 0, after_s: 9}]\n"
        "offers:\n  - {id: a, region: x, gpu_type: T4, spot_price: 0.1}\n"
    )
    p = get_provider("fake")
    assert isinstance(p, FakeProvider) and p.home == corral_home
    assert p.cloud.launch_delay_s == 3 and p.cloud.preemptions[0].after_s == 9
    assert [(o.offer_id, o.spot) for o in p.offers(Requirements())] == [("a:spot", True)]


def test_ephemeral_disk_gives_each_machine_its_own_checkpoint_dir(make_fake, tmp_path) -> None:
    p = make_fake(cloud(ephemeral_disk=True))
    boot = bootstrap(tmp_path, "eph-a1", run='echo "$CORRAL_CHECKPOINT_DIR" > where; sleep 60')
    inst = p.launch(offer(p), boot, "eph-a1")
    # the plan is not rewritten: the machine tells its agent where its own disk is
    plan = Path(inst.data["dir"]) / "machine" / "instances" / "eph-a1" / "plan.json"
    assert json.loads(plan.read_text())["checkpoint_dir"] == boot.plan.checkpoint_dir
    where = on_node(inst, tmp_path / "where")
    ckpt = wait_until(lambda: where.exists() and where.read_text().strip(), message="the stage")
    machine = Path(inst.data["dir"]) / "machine"
    assert ckpt == NodeView(machine).path(machine / "disk" / "checkpoints")


def test_fake_and_local_providers_support_simulated_preemption() -> None:
    assert issubclass(FakeProvider, SupportsSpot)
    assert issubclass(FakeProvider, SupportsPreemptionNotice)
    assert issubclass(FakeProvider, SupportsSimulatedPreemption)
    assert issubclass(LocalProvider, SupportsSimulatedPreemption)
    caps = {c.name: c for c in FakeProvider.capabilities()}
    assert caps["SupportsSimulatedPreemption"].supported
    assert not caps["SupportsStop"].supported and "stopped" in caps["SupportsStop"].reason


# --- end to end with a real controller --------------------------------------------------------


@pytest.mark.slow
def test_a_run_on_the_fake_cloud_is_preempted_and_recovered_by_the_controller(
    corral_home, monkeypatch, tmp_path
) -> None:
    from control.helpers import start_controller, state_events, submit, wait_for, write_spec
    from corral.store import Store

    cloud_file = tmp_path / "cloud.json"
    cloud_file.write_text(json.dumps(cloud(launch_delay_s=0.3, notice_s=3.0)))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud_file))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    spec = write_spec(
        tmp_path,
        """
        name: spotty
        resources: {spot: true, providers: [fake]}
        stages:
          - name: prep
            run: echo prepared >> "$CORRAL_CHECKPOINT_DIR/prep.txt"
          - name: train
            needs: [prep]
            run: |
              echo "attempt $CORRAL_ATTEMPT" >> "$CORRAL_CHECKPOINT_DIR/attempts.txt"
              if [ "$CORRAL_ATTEMPT" = 1 ]; then trap 'exit 75' TERM; sleep 60 & wait; fi
              echo trained
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    volume = corral_home / "fake" / "volumes" / run_id / "checkpoints"
    proc = start_controller()
    try:
        # the market takes the machine back once attempt 1 trains (its code arrived first)
        wait_until((volume / "attempts.txt").exists, 60, message="attempt 1 to train")
        [inst] = FakeProvider(home=corral_home).list_instances()
        FakeProvider(home=corral_home).preempt(inst, grace=3.0)
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=60)
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    states = state_events(store, run_id)
    assert states[:3] == ["PENDING", "PROVISIONING", "RUNNING"]
    assert "RECOVERING" in states and states[-2:] == ["STOPPING", "SUCCEEDED"]
    first, second = store.attempts(run_id)
    assert first.exit_reason == "preempted" and first.provider == "fake"
    assert first.price_per_hour == 0.3 and second.exit_reason == "succeeded"
    # the machines share no file with the controller, only the cloud's volume of the run
    assert (volume / "attempts.txt").read_text() == "attempt 1\nattempt 2\n"
    assert (volume / "prep.txt").read_text() == "prepared\n"  # not run again
    assert not (tmp_path / "attempts.txt").exists()
    assert store.resources(run_id=run_id, open_only=True) == []
    assert FakeProvider(home=corral_home).list_instances() == []
    assert len(os.listdir(corral_home / "fake" / "instances")) == 2  # two machines, both gone
