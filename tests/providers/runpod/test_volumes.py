"""Named volumes (``spec.volumes``) on RunPod: offers only where the network volume is or can
be created, the launch creates a missing one and mounts it, a second run finds what the first
left on it, runs never delete it, and ``corral volume ls/rm`` list and delete it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.errors import InfeasibleRequest
from corral.providers.base import Requirements, VolumeRequest
from corral.store import Store

from ..contract import new_key
from .fake_server import API_KEY
from .helpers import bootstrap

DATA = VolumeRequest(name="data", size_gb=20, mount="/data")


def req(**kw) -> Requirements:
    return Requirements(gpu_type="L40S", gpu_count_min=1, volumes=[DATA], **kw)


def test_a_new_volume_pins_each_offer_to_a_data_center_with_the_gpu(make_provider):
    offers = make_provider().offers(req(spot=False))
    assert {o.region for o in offers} == {"EU-RO-1", "US-TX-3"}
    assert all(o.details["data_center_id"] == o.region for o in offers)
    assert all(o.details["volumes"] == [DATA.model_dump()] for o in offers)
    h100 = make_provider().offers(
        Requirements(gpu_type="H100", gpu_count_min=1, volumes=[DATA], spot=False)
    )
    assert {o.region for o in h100} == {"US-TX-3"}  # the only place with H100s


def test_an_existing_volume_pins_the_offers_to_its_data_center(make_provider):
    p = make_provider()
    p.create_volume("data", 20, "US-TX-3")
    assert {o.region for o in p.offers(req())} == {"US-TX-3"}
    assert p.offers(req(regions=["EU-RO-1"])) == []  # the volume is not there


def test_what_a_pod_cannot_mount_is_infeasible(make_provider):
    two = [DATA, VolumeRequest(name="more", size_gb=10, mount="/more")]
    with pytest.raises(InfeasibleRequest, match="pods mount one network volume; the job names 2"):
        make_provider().offers(Requirements(gpu_count_min=1, volumes=two))
    with pytest.raises(InfeasibleRequest, match="at most 4096 GB"):
        big = DATA.model_copy(update={"size_gb": 5000})
        make_provider().offers(Requirements(gpu_count_min=1, volumes=[big]))
    vol = make_provider().create_volume("ckpts", 10, "EU-RO-1")
    with pytest.raises(InfeasibleRequest, match="NETWORK_VOLUME_ID already mounts"):
        make_provider(network_volume_id=vol["id"]).offers(req())


def test_launch_creates_the_missing_volume_where_the_offer_is_and_mounts_it(
    make_provider, fake, tmp_path
):
    p = make_provider()
    o = next(o for o in p.offers(req(spot=False)) if o.region == "US-TX-3")
    key = new_key()
    inst = p.launch(o, bootstrap(tmp_path / "w", key), key)
    [vol] = fake.cloud.volumes.values()
    assert (vol["name"], vol["size"], vol["dataCenter"]) == ("data", 20, "US-TX-3")
    body = fake.creates[-1]
    assert body["mounts"] == {"network": [{"volumeId": vol["id"], "path": "/data"}]}
    assert body["dataCenterIds"] == ["US-TX-3"]
    [info] = p.list_volumes()
    assert (info.name, info.state, info.attached_to) == ("data", "in-use", [inst.instance_id])
    p.terminate(inst)
    assert list(fake.cloud.volumes) == [vol["id"]]  # a pod's end never deletes it
    again = new_key()
    p.launch(o, bootstrap(tmp_path / "w", again), again)
    assert len(fake.cloud.volumes) == 1  # found, not created twice
    spot = next(o for o in p.offers(req(spot=True)))
    third = new_key()
    p.launch(spot, bootstrap(tmp_path / "w", third), third)
    inp = fake.creates[-1]
    assert (inp["networkVolumeId"], inp["volumeMountPath"]) == (vol["id"], "/data")
    assert inp["dataCenterId"] == "US-TX-3"


@pytest.mark.slow
def test_a_volume_outlives_its_run_carries_data_to_the_next_and_only_rm_deletes_it(
    fake, tmp_path, corral_home, monkeypatch
):
    from control.helpers import start_controller, submit, wait_for, write_spec

    env = {
        **{f"CORRAL_RUNPOD_{k.upper()}": v for k, v in fake.settings().items()},
        "CORRAL_RUNPOD_RATE_PER_S": "none",
        "CORRAL_PROVIDERS": "runpod,local",
        "RUNPOD_API_KEY": API_KEY,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    mount = tmp_path / "mnt" / "data"  # outside the job's workdir, which is shipped
    job = tmp_path / "job"
    job.mkdir()

    def spec(name: str, run: str):
        return write_spec(
            job,
            f"""
            name: {name}
            resources: {{gpus: "L40S:1", spot: false}}
            volumes:
              - {{name: datasets, size: 15GB, mount: {mount}}}
            run: {run}
            """,
            name=f"{name}.yaml",
        )

    store = Store.open()
    first = submit(spec("writer", f"echo hello > {mount}/greeting.txt"))
    proc = start_controller()
    try:
        run = wait_for(store, first, {"SUCCEEDED", "FAILED"}, timeout=60)
        assert run.state == "SUCCEEDED", run.reason
        [vol] = fake.cloud.volumes.values()
        assert (vol["name"], vol["size"]) == ("datasets", 15)
        second = submit(spec("reader", f"cat {mount}/greeting.txt > {mount}/read.txt"))
        run = wait_for(store, second, {"SUCCEEDED", "FAILED"}, timeout=60)
        assert run.state == "SUCCEEDED", run.reason
    finally:
        proc.terminate()
        proc.wait(10)
    files = fake.cloud.volume_dir(vol["id"])
    assert (files / "read.txt").read_text() == "hello\n"  # the second run saw the first's file
    assert fake.cloud.list() == [] and list(fake.cloud.volumes) == [vol["id"]]
    assert [b["mounts"]["network"][0]["volumeId"] for b in fake.creates] == [vol["id"]] * 2
    assert fake.creates[1]["dataCenterIds"] == [vol["dataCenter"]]  # where the volume is

    cli = CliRunner()
    listed = cli.invoke(app, ["volume", "ls", "--json"])
    assert listed.exit_code == 0, listed.output
    data = json.loads(listed.stdout)
    assert [
        (v["name"], v["provider"], v["region"], v["size_gb"], v["state"]) for v in data["volumes"]
    ] == [("datasets", "runpod", vol["dataCenter"], 15, "available")]
    assert {p["provider"]: p["reason"] for p in data["providers"]}["local"].startswith(
        "no persistent volumes ("
    )
    human = cli.invoke(app, ["volume", "ls"])
    assert "datasets" in human.stdout and "15 GB" in human.stdout
    missing = cli.invoke(app, ["volume", "rm", "nope", "--yes"])
    assert missing.exit_code == 3 and "no volume named 'nope'" in missing.output
    removed = cli.invoke(app, ["volume", "rm", "datasets", "--json"])
    assert removed.exit_code == 0, removed.output
    assert [v["volume_id"] for v in json.loads(removed.stdout)["removed"]] == [vol["id"]]
    assert fake.cloud.volumes == {}


def test_a_volume_made_by_an_earlier_try_elsewhere_is_never_made_twice(
    make_provider, fake, tmp_path
):
    from corral.errors import NoCapacity

    p = make_provider()
    offers = p.offers(req(spot=False))
    eu = next(o for o in offers if o.region == "EU-RO-1")
    p.create_volume("data", 20, "US-TX-3")  # the try before this one, in the other place
    key = new_key()
    with pytest.raises(NoCapacity, match="'data' is in US-TX-3 now, not in EU-RO-1"):
        p.launch(eu, bootstrap(tmp_path / "w", key), key)
    assert len(fake.cloud.volumes) == 1 and fake.cloud.list() == []
