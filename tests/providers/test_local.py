"""The local provider against real processes: the contract, GPU sharing, process trees."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest
from pydantic import ValidationError

from corral.errors import BadInput, Conflict, InfeasibleRequest, NoCapacity, ProviderError
from corral.gpu import parse_fake
from corral.providers.base import Bootstrap, InstanceState, Requirements
from corral.providers.common.device_locks import DeviceLocks
from corral.providers.common.files import utcnow
from corral.providers.common.host_state import InstanceRecord, Layout
from corral.providers.local import ENV_LOCAL_PRICE, LocalProvider
from corral.providers.local.settings import gpu_lock_dir
from support.waiting import wait_until

from .contract import ProviderContract, trivial_plan


def bootstrap(workdir: Path, key: str, run: str = "sleep 60", **env: str) -> Bootstrap:
    plan = trivial_plan(workdir, key, run)
    return Bootstrap(plan=plan.model_dump(mode="json"), token="tok-" + key, env=env)


def gpu_req(n: int, gpu_type: str | None = None) -> Requirements:
    return Requirements(gpu_type=gpu_type, gpu_count_min=n, gpu_count_max=n)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stage_entries(inst) -> list[dict]:
    """The agent's children.json entries once it lists a running stage."""
    path = Path(inst.data["dir"]) / "agent" / "children.json"

    def read() -> list[dict]:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return []

    return wait_until(read, message="a stage in children.json")


def group_pids(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and running(p.pid):
                out.append(p.pid)
        except OSError:
            continue
    return out


@pytest.fixture
def make_provider(corral_home: Path):
    """Local providers on a declared inventory, running the real agent (python -m corral.agent)."""
    made: list[LocalProvider] = []

    def make(inventory: str = "L40S:4", **kw) -> LocalProvider:
        p = LocalProvider(home=corral_home, gpus=parse_fake(inventory), **kw)
        made.append(p)
        return p

    yield make
    for p in made:  # never leave an agent behind
        for inst in p.list_instances():
            p.terminate(inst)


class TestLocalProviderContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider) -> LocalProvider:
        return make_provider("L40S:2")

    @pytest.fixture
    def requirements(self) -> Requirements:
        return gpu_req(1, "L40S")


# --- GPU allocation ---------------------------------------------------------------------------


def test_two_launches_get_disjoint_gpus_and_a_third_waits_until_one_ends(make_provider, tmp_path):
    p = make_provider("L40S:4")
    offer = p.offers(gpu_req(2))[0]
    with ThreadPoolExecutor(2) as pool:  # two launches at once
        a, b = pool.map(lambda k: p.launch(offer, bootstrap(tmp_path, k), k), ["ra-a1", "rb-a1"])
    assert len(a.data["gpus"]) == len(b.data["gpus"]) == 2
    assert not set(a.data["gpus"]) & set(b.data["gpus"])
    assert p.offers(gpu_req(2))[0].available is False
    with pytest.raises(NoCapacity, match="waiting for 2 GPUs: 4 of 4 are held by other runs"):
        p.launch(offer, bootstrap(tmp_path, "rc-a1"), "rc-a1")
    assert p.find("rc-a1") is None
    p.terminate(a)
    c = p.launch(offer, bootstrap(tmp_path, "rc-a1"), "rc-a1")
    assert sorted(c.data["gpus"]) == sorted(a.data["gpus"])
    # the plan file is the plan as built; what only this machine knows is a launch argument
    plan = json.loads((Path(c.data["dir"]) / "plan.json").read_text())
    assert plan == bootstrap(tmp_path, "rc-a1").plan.model_dump(mode="json")
    argv = psutil.Process(c.data["pid"]).cmdline()
    assert argv[argv.index("--devices") + 1] == ",".join(c.data["gpus"])
    assert argv[argv.index("--state-dir") + 1] == str(Path(c.data["dir"]) / "agent")


def _race(home: str, python: str, workdir: str, key: str, barrier, results) -> None:
    p = LocalProvider(home=Path(home), gpus=parse_fake("L40S:2"), python=python)
    offer = p.offers(gpu_req(1))[0]
    barrier.wait(timeout=30)
    try:
        inst = p.launch(offer, bootstrap(Path(workdir), key), key)
        results.put((key, "ok", inst.data["gpus"]))
    except NoCapacity:
        results.put((key, "no_capacity", []))


def test_processes_racing_for_gpus_never_get_the_same_one(make_provider, corral_home, tmp_path):
    p = make_provider("L40S:2")
    ctx = multiprocessing.get_context("fork")
    n = 5
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(
            target=_race,
            args=(str(corral_home), p.python, str(tmp_path), f"race{i}-a1", barrier, results),
        )
        for i in range(n)
    ]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=60) for _ in procs]
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    winners = [o for o in outcomes if o[1] == "ok"]
    assert len(winners) == 2
    assert [o[1] for o in outcomes].count("no_capacity") == n - 2
    given = [g for o in winners for g in o[2]]
    assert sorted(given) == ["0", "1"]
    assert {i.key for i in p.list_instances()} == {o[0] for o in winners}


def test_two_corral_homes_on_one_machine_never_get_the_same_gpu(
    tmp_path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    alice = LocalProvider(home=tmp_path / "alice")
    bob = LocalProvider(home=tmp_path / "bob")
    try:
        a = alice.launch(alice.offers(gpu_req(2))[0], bootstrap(tmp_path, "al-a1"), "al-a1")
        assert sorted(a.data["gpus"]) == ["0", "1"]
        # bob's home has no record of alice's run; the machine-wide locks still say busy
        offer = bob.offers(gpu_req(1))[0]
        assert offer.available is False
        assert [h["other_home"] for h in bob.gpu_holders()] == [True, True]
        with pytest.raises(NoCapacity, match="waiting for 1 GPUs: 2 of 2 are held"):
            bob.launch(offer, bootstrap(tmp_path, "bo-a1"), "bo-a1")
        # the kernel drops the lock when the agent dies, even by SIGKILL
        os.kill(a.data["pid"], signal.SIGKILL)
        wait_until(lambda: bob.offers(gpu_req(1))[0].available, message="alice's GPUs free")
        b = bob.launch(bob.offers(gpu_req(2))[0], bootstrap(tmp_path, "bo-a1"), "bo-a1")
        assert sorted(b.data["gpus"]) == ["0", "1"]
        assert alice.offers(gpu_req(1))[0].available is False
    finally:
        for p in (alice, bob):
            for inst in p.list_instances():
                p.terminate(inst)


def test_a_gpu_locked_between_choice_and_start_is_no_capacity_and_leaves_nothing(
    make_provider, tmp_path
):
    p = make_provider("L40S:1")
    offer = p.offers(gpu_req(1))[0]
    other_home = DeviceLocks(gpu_lock_dir(), "fake").hold(["0"])  # wins the race
    with other_home, pytest.raises(NoCapacity, match="GPU 0 is held by a run of another"):
        p.host.launch(
            "late-a1", bootstrap(tmp_path, "late-a1"), offer=offer, choose_gpus=lambda h: ["0"]
        )
    assert p.find("late-a1") is None
    assert p.offers(gpu_req(1))[0].available


# --- offers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inventory", "req", "message"),
    [
        ("L40S:2", gpu_req(8), "this machine has 2 GPUs (L40S x2); the job asks for 8"),
        ("L40S:2", gpu_req(1, "A100"), "the job asks for A100 GPUs; this machine has L40S"),
        ("", gpu_req(1), "the job asks for GPUs; this machine has none (set CORRAL_FAKE_GPUS="),
        ("L40S:1", Requirements(spot=True), "the local provider has no spot machines"),
        ("L40S:1", Requirements(cpus=100000), "the job asks for 100000 CPUs; this machine has"),
    ],
)
def test_requests_this_machine_can_never_fit_are_infeasible(make_provider, inventory, req, message):
    with pytest.raises(InfeasibleRequest) as err:
        make_provider(inventory).offers(req)
    assert str(err.value).startswith(message)


def test_offer_describes_the_machine_and_clips_the_gpu_count(make_provider):
    p = make_provider("L40S:2,A100:4")
    [offer] = p.offers(Requirements(gpu_type="a100", gpu_count_min=2, gpu_count_max=8))
    assert (offer.offer_id, offer.region, offer.spot) == ("local", "local", False)
    assert (offer.gpu_type, offer.gpu_count) == ("A100", 4)
    assert offer.cpus == os.cpu_count() and offer.memory_gb > 0
    assert (offer.available, offer.availability) == (True, "high")
    assert offer.details["inventory"] == "L40S x2, A100 x4"


def test_offers_skip_when_other_providers_or_regions_or_a_lower_price_are_asked(make_provider):
    p = make_provider("L40S:1", price_per_hour=2.0)
    assert p.offers(Requirements(providers=["aws"])) == []
    assert p.offers(Requirements(regions=["us-east-1"])) == []
    assert p.offers(Requirements(max_hourly_price=1.0)) == []
    assert len(p.offers(Requirements(providers=["local"], max_hourly_price=2.0))) == 1


def test_prices_come_from_the_environment(make_provider, monkeypatch):
    monkeypatch.setenv(ENV_LOCAL_PRICE, "0.75")
    assert make_provider("L40S:1").offers(gpu_req(1))[0].price_per_hour == 0.75
    monkeypatch.delenv(ENV_LOCAL_PRICE)
    assert make_provider("L40S:1").offers(gpu_req(1))[0].price_per_hour == 0.0
    for bad in ("cheap", "-1", "nan"):
        monkeypatch.setenv(ENV_LOCAL_PRICE, bad)
        with pytest.raises(BadInput, match=ENV_LOCAL_PRICE):
            make_provider("L40S:1")
    monkeypatch.delenv(ENV_LOCAL_PRICE)  # the shared home cleanup builds a LocalProvider too


def test_an_instance_launched_on_a_mixed_inventory_gets_gpus_of_the_offered_type(
    make_provider, tmp_path
):
    p = make_provider("L40S:2,A100:4")
    offer = p.offers(gpu_req(3, "A100"))[0]
    inst = p.launch(offer, bootstrap(tmp_path, "mix-a1"), "mix-a1")
    assert inst.data["gpus"] == ["2", "3", "4"]
    holders = {h["id"]: h for h in p.gpu_holders()}
    assert [h["run_id"] for h in holders.values()] == [None, None, "mix", "mix", "mix", None]
    assert holders["2"]["key"] == "mix-a1" and holders["2"]["name"] == "A100"


# --- launch inputs ----------------------------------------------------------------------------


def test_launch_rejects_bad_keys_missing_workdirs_and_invalid_plans(make_provider, tmp_path):
    p = make_provider("L40S:1")
    offer = p.offers(gpu_req(1))[0]
    with pytest.raises(BadInput, match="bad instance key"):
        p.launch(offer, bootstrap(tmp_path, "k"), "../escape")
    with pytest.raises(BadInput, match="is not a directory"):
        p.launch(offer, bootstrap(tmp_path / "missing", "k-a1"), "k-a1")
    # a bootstrap holds a valid plan or does not exist; its error never shows the plan's values
    with pytest.raises(ValidationError, match=r"plan\.workdir") as err:
        Bootstrap(plan={"run_id": "r", "env": {"SECRET": "hunter2"}}, token="t")
    assert "hunter2" not in str(err.value)
    assert p.list_instances() == []


def test_the_agent_gets_the_token_and_bootstrap_env_and_the_plan_is_private(
    make_provider, tmp_path
):
    p = make_provider("L40S:1")
    offer = p.offers(gpu_req(1))[0]
    run = 'printf %s "$HF_TOKEN" > hf.txt; sleep 60'
    inst = p.launch(offer, bootstrap(tmp_path, "env-a1", run, HF_TOKEN="hf-secret"), "env-a1")
    assert wait_until(lambda: (tmp_path / "hf.txt").exists() and (tmp_path / "hf.txt").read_text())
    assert (tmp_path / "hf.txt").read_text() == "hf-secret"  # bootstrap.env reached the stage
    endpoint = wait_until(lambda: p.status(inst).endpoint, message="the agent's endpoint")
    assert httpx.get(f"{endpoint}/status").status_code == 401
    ok = httpx.get(f"{endpoint}/status", headers={"Authorization": "Bearer tok-env-a1"})
    assert ok.status_code == 200  # the agent was given bootstrap.token
    assert psutil.Process(inst.data["pid"]).cwd() == str(tmp_path)
    assert (Path(inst.data["dir"]) / "plan.json").stat().st_mode & 0o077 == 0


def test_an_agent_that_cannot_be_started_leaves_nothing_behind(make_provider, tmp_path):
    p = make_provider("L40S:1", python=str(tmp_path / "no-such-python"))
    offer = p.offers(gpu_req(1))[0]
    with pytest.raises(ProviderError, match="cannot start the agent"):
        p.launch(offer, bootstrap(tmp_path, "nopy-a1"), "nopy-a1")
    assert p.find("nopy-a1") is None
    assert p.offers(gpu_req(1))[0].available


def test_an_interrupted_launch_is_finished_by_launching_again(make_provider, tmp_path):
    p = make_provider("L40S:2")
    offer = p.offers(gpu_req(1))[0]
    rec = InstanceRecord(
        key="cut-a1",
        instance_id="local-cut",
        run_id="cut",
        gpus=["0"],
        gpu_type="L40S",
        created_at=utcnow(),
        offer=offer.model_dump(mode="json"),
    )
    Layout(p.home / "local").write(
        rec
    )  # what a controller killed right after writing the record leaves
    assert p.find("cut-a1") is not None
    assert p.status(p.find("cut-a1")).state == InstanceState.FAILED
    assert p.gpu_holders()[0]["key"] == "cut-a1"
    inst = p.launch(offer, bootstrap(tmp_path, "cut-a1"), "cut-a1")
    assert inst.instance_id == "local-cut" and inst.data["pid"]
    assert p.status(inst).state in (InstanceState.PROVISIONING, InstanceState.RUNNING)


def test_an_agent_started_by_an_interrupted_launch_is_adopted_not_started_twice(
    make_provider, tmp_path
):
    p = make_provider("L40S:1")
    offer = p.offers(gpu_req(1))[0]
    inst = p.launch(offer, bootstrap(tmp_path, "adopt-a1"), "adopt-a1")
    layout = Layout(p.home / "local")
    # what a controller killed between starting the agent and recording its pid leaves
    layout.write(layout.read("adopt-a1").model_copy(update={"pid": None, "create_time": None}))
    assert p.status(inst).state in (InstanceState.PROVISIONING, InstanceState.RUNNING)
    assert layout.read("adopt-a1").pid == inst.data["pid"]
    layout.write(layout.read("adopt-a1").model_copy(update={"pid": None, "create_time": None}))
    again = p.launch(offer, bootstrap(tmp_path, "adopt-a1"), "adopt-a1")
    assert again.data["pid"] == inst.data["pid"]


# --- processes --------------------------------------------------------------------------------


def test_terminate_kills_the_whole_tree_including_detached_grandchildren(make_provider, tmp_path):
    p = make_provider("L40S:1")
    offer = p.offers(gpu_req(1))[0]
    stage = "(sleep 1000 &) ; echo started; sleep 999"
    inst = p.launch(offer, bootstrap(tmp_path, "tree-a1", stage), "tree-a1")
    pgid = stage_entries(inst)[0]["pgid"]

    def sleeps() -> list[int]:
        return [q for q in group_pids(pgid) if psutil.Process(q).cmdline()[:1] == ["sleep"]]

    tree = wait_until(lambda: len(sleeps()) == 2 and sleeps(), message="stage and grandchild")
    tree = [*tree, inst.data["pid"], pgid]
    p.terminate(inst)
    assert [q for q in tree if running(q)] == []
    assert p.status(inst).state == InstanceState.TERMINATED
    assert p.gpu_holders()[0]["key"] is None


def test_the_agent_outlives_the_process_that_launched_it(make_provider, corral_home, tmp_path):
    p = make_provider("L40S:1")
    boot = tmp_path / "bootstrap.json"
    boot.write_text(bootstrap(tmp_path, "orph-a1").model_dump_json())
    script = (
        "import sys; from pathlib import Path\n"
        "from corral.gpu import parse_fake\n"
        "from corral.providers.base import Bootstrap, Requirements\n"
        "from corral.providers.local import LocalProvider\n"
        "p = LocalProvider(home=Path(sys.argv[1]), gpus=parse_fake('L40S:1'), python=sys.argv[2])\n"
        "offer = p.offers(Requirements(gpu_count_min=1, gpu_count_max=1))[0]\n"
        "boot = Bootstrap.model_validate_json(Path(sys.argv[3]).read_text())\n"
        "print(p.launch(offer, boot, 'orph-a1').data['pid'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(corral_home), p.python, str(boot)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    pid = int(out.stdout.split()[-1])
    inst = p.find("orph-a1")
    assert inst is not None and inst.data["pid"] == pid
    st = wait_until(
        lambda: (s := p.status(inst)).state == InstanceState.RUNNING and s, message="RUNNING"
    )
    assert st.endpoint and st.endpoint.startswith("http://127.0.0.1:")
    assert running(pid)
    p.terminate(inst)
    assert not running(pid)


def test_the_launching_process_reaps_its_ended_agents(make_provider, tmp_path):
    p = make_provider("L40S:1")
    inst = p.launch(p.offers(gpu_req(1))[0], bootstrap(tmp_path, "reap-a1"), "reap-a1")
    pid = inst.data["pid"]
    assert psutil.Process(pid).ppid() == os.getpid()
    p.terminate(inst)

    def our_zombie() -> bool:
        try:
            return psutil.Process(pid).ppid() == os.getpid()
        except psutil.NoSuchProcess:
            return False

    wait_until(lambda: not our_zombie(), timeout=5, message="the agent to be reaped")


def test_launch_status_offers_and_terminate_never_scan_the_machines_processes(
    make_provider, tmp_path, monkeypatch
):
    """Each instance's own process groups are asked; ``psutil.process_iter`` (a walk over
    every process of the machine) is not called on launch, status, offers or teardown, and
    one reaper thread waits for all the agents this process started."""
    p = make_provider("L40S:4")

    def no_scan(*a, **kw):
        raise AssertionError("the machine's processes were scanned")

    monkeypatch.setattr(psutil, "process_iter", no_scan)
    insts = [
        p.launch(p.offers(gpu_req(1))[0], bootstrap(tmp_path, f"ns{i}-a1"), f"ns{i}-a1")
        for i in range(3)
    ]
    for inst in insts:
        wait_until(lambda inst=inst: p.status(inst).state == InstanceState.RUNNING)
    assert p.offers(gpu_req(1))[0].details["gpus_free"] == 1
    reapers = [t.name for t in threading.enumerate() if t.name.startswith("corral-reap")]
    assert reapers == ["corral-reaper"]
    for inst in insts:
        p.terminate(inst)
        assert not running(inst.data["pid"])
    assert p.offers(gpu_req(1))[0].details["gpus_free"] == 4


def test_an_agent_that_dies_is_failed_and_frees_its_gpus(make_provider, tmp_path):
    p = make_provider("L40S:1")
    inst = p.launch(p.offers(gpu_req(1))[0], bootstrap(tmp_path, "die-a1", "sleep 60"), "die-a1")
    for entry in stage_entries(inst):
        os.killpg(entry["pgid"], signal.SIGKILL)
        wait_until(lambda e=entry: not group_pids(e["pgid"]), message="the stage to die")
    os.kill(inst.data["pid"], signal.SIGKILL)
    st = wait_until(lambda: (s := p.status(inst)).state == InstanceState.FAILED and s)
    assert st.detail == f"agent process exited (see {inst.data['dir']}/agent.out)"
    # free once no process of the instance is left: a child the agent had just started (its
    # manifest's git call, say) may outlive it by a moment on a loaded machine
    wait_until(lambda: p.offers(gpu_req(1))[0].available, message="the GPU to be free")
    assert [i.key for i in p.list_instances()] == ["die-a1"]  # until terminated
    p.terminate(inst)
    assert p.list_instances() == []


def test_a_stage_group_whose_pgid_was_reused_is_left_alone(make_provider, tmp_path):
    p = make_provider("L40S:1")
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        inst = p.launch(p.offers(gpu_req(1))[0], bootstrap(tmp_path, "reuse-a1"), "reuse-a1")
        children = Path(inst.data["dir"]) / "agent" / "children.json"
        entries = stage_entries(inst)
        ct = psutil.Process(stranger.pid).create_time()
        entries.append({"stage": "old", "pgid": stranger.pid, "create_time": ct + 50})
        children.write_text(json.dumps(entries))
        p.terminate(inst)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_preempt_stops_the_run_and_status_says_preempted(make_provider, tmp_path):
    p = make_provider("L40S:1")
    inst = p.launch(p.offers(gpu_req(1))[0], bootstrap(tmp_path, "pre-a1"), "pre-a1")
    p.preempt(inst, grace=1.0)
    assert not running(inst.data["pid"])
    assert p.status(inst).state == InstanceState.PREEMPTED
    assert p.offers(gpu_req(1))[0].available
    p.terminate(inst)
    assert p.status(inst).state == InstanceState.TERMINATED
    with pytest.raises(Conflict):
        p.preempt(inst)


def test_preempt_reaches_ranks_a_launcher_started_in_sessions_of_their_own(make_provider, tmp_path):
    # torchrun's way: each rank in a session of its own; this one ignores SIGTERM
    run = "setsid bash -c 'trap \"\" TERM; echo $$ > rank.pid; sleep 300' & wait"
    p = make_provider("L40S:1")
    inst = p.launch(p.offers(gpu_req(1))[0], bootstrap(tmp_path, "rank-a1", run), "rank-a1")
    pid_file = tmp_path / "rank.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), message="the rank")
    rank = psutil.Process(int(pid_file.read_text()))
    p.preempt(inst, grace=0.3)  # sooner than the agent's own grace: the machine goes first
    _, alive = psutil.wait_procs([rank], timeout=5)
    assert alive == []
    p.terminate(inst)


def test_logs_tail_the_agent_output_and_stage_logs(make_provider, tmp_path):
    p = make_provider("L40S:1")
    run = "for i in $(seq 1 50); do echo line-$i; done; sleep 60"
    inst = p.launch(p.offers(gpu_req(1))[0], bootstrap(tmp_path, "log-a1", run), "log-a1")
    text = wait_until(lambda: "line-50" in (t := p.logs(inst, tail=5)) and t, message="logs")
    assert "==> agent.out <==" in text
    assert "==> agent/logs/train.log <==" in text
    assert "line-46" in text and "line-45" not in text


def test_cleanup_removes_only_old_terminated_instances(make_provider, tmp_path):
    p = make_provider("L40S:2")
    offer = p.offers(gpu_req(1))[0]
    old = p.launch(offer, bootstrap(tmp_path, "old-a1"), "old-a1")
    live = p.launch(offer, bootstrap(tmp_path, "live-a1"), "live-a1")
    p.terminate(old)
    assert p.cleanup(older_than_s=3600) == []
    assert p.cleanup(older_than_s=3600, now=time.time() + 7200) == ["old-a1"]
    assert p.find("old-a1") is None
    assert p.find("live-a1") is not None and p.status(live).state != InstanceState.TERMINATED
