"""An agent whose plan ships code: it waits for the bundle (``PUT /code/<sha256>``, resumable,
verified), unpacks it into a workdir of its own (under ``--root``), puts the ``files`` in
place, then runs the stages there; or fetches it from object storage itself."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import httpx

from corral.agent.main import NodeLaunch
from corral.bundle import pack as packing
from corral.wire.code import BundleRef, CodePlan, FileDrop

from .helpers import TOKEN, make_plan


def _bundle(tmp_path: Path):
    work = tmp_path / "controller" / "work"
    work.mkdir(parents=True)
    (work / "job.sh").write_text("echo shipped; cat data.txt\n")
    (work / "data.txt").write_text("data\n")
    conf = tmp_path / "controller" / "test.conf"
    conf.write_text("conf\n")
    return packing.pack(tmp_path / "cache", packing.collect(str(work), [("0", str(conf))]))


def _plan(tmp_path: Path, bundle, storage: str | None = None, inline: str | None = None):
    code = CodePlan(
        bundle=BundleRef(sha256=bundle.sha256, size=bundle.size, storage=storage, inline=inline),
        files=[FileDrop(member="0", path="/etc/corral-test.conf", mode=0o600)],
    )
    return make_plan(
        tmp_path,
        [{"name": "main", "run": "bash job.sh"}],
        workdir="/corral/runs/run-1/work",
        checkpoint_dir="/corral/runs/run-1/checkpoints",
        code=code,
    )


def _put(url: str, sha: str, offset: int, data: bytes) -> httpx.Response:
    return httpx.put(
        f"{url}/code/{sha}",
        params={"offset": offset},
        content=data,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
    )


def test_the_agent_waits_for_its_code_and_runs_the_stages_in_it(start_agent, tmp_path) -> None:
    bundle = _bundle(tmp_path)
    root = tmp_path / "node"
    client = start_agent(_plan(tmp_path, bundle), launch=NodeLaunch(root=str(root)))
    waiting = client.wait_until(lambda s: s["code"]["state"] == "waiting")
    assert waiting["code"] == {
        "state": "waiting",
        "source": None,
        "sha256": bundle.sha256,
        "size": bundle.size,
        "received": 0,
    }
    assert waiting["stages"][0]["state"] == "pending"
    data = bundle.path.read_bytes()
    half = len(data) // 2
    assert _put(client.url, bundle.sha256, 0, data[:half]).json()["received"] == half
    wrong = _put(client.url, bundle.sha256, 0, data[half:])
    assert wrong.status_code == 409 and "has" in wrong.json()["error"]
    assert _put(client.url, "1" * 64, 0, b"x").status_code == 409  # not this attempt's
    unauthorized = httpx.put(f"{client.url}/code/{bundle.sha256}", content=b"x", timeout=10)
    assert unauthorized.status_code == 401
    assert client.get("/code")["received"] == half
    assert _put(client.url, bundle.sha256, half, data[half:]).status_code == 200
    done = client.wait_finished()
    assert done["phase"] == "succeeded" and done["code"]["state"] == "ready"
    workdir = root / "corral" / "runs" / "run-1" / "work"
    state = root / str(tmp_path / "state").lstrip("/")  # the plan's paths are under --root
    log = (state / "logs" / "main.log").read_text()
    assert "shipped" in log and "data" in log
    assert (workdir / "data.txt").read_text() == "data\n"
    conf = root / "etc" / "corral-test.conf"
    assert conf.read_text() == "conf\n" and conf.stat().st_mode & 0o777 == 0o600
    assert (root / "corral" / "runs" / "run-1" / "checkpoints").is_dir()
    events = [e["type"] for e in client.get("/events")["events"]]
    assert events.index("code.ready") < events.index("stage.started")


def test_bytes_that_are_not_the_announced_bundle_are_refused_with_422(
    start_agent, tmp_path
) -> None:
    bundle = _bundle(tmp_path)
    client = start_agent(_plan(tmp_path, bundle), launch=NodeLaunch(root=str(tmp_path / "n")))
    client.wait_until(lambda s: s["code"]["state"] == "waiting")
    data = bytearray(bundle.path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the right size, one byte wrong
    bad = _put(client.url, bundle.sha256, 0, bytes(data))
    assert bad.status_code == 422, bad.text
    assert client.get("/code")["state"] == "waiting"  # nothing kept: it waits still
    assert _put(client.url, bundle.sha256, 0, bundle.path.read_bytes()).status_code == 200
    assert client.wait_finished()["phase"] == "succeeded"


def test_the_agent_fetches_its_code_from_storage(start_agent, tmp_path) -> None:
    bundle = _bundle(tmp_path)
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    shutil.copy(bundle.path, bucket / "b.tar.gz")
    plan = _plan(tmp_path, bundle, storage=f"file://{bucket}/b.tar.gz")
    client = start_agent(plan, launch=NodeLaunch(root=str(tmp_path / "node")))
    done = client.wait_finished()
    assert done["phase"] == "succeeded", done["reason"]
    assert done["code"]["source"] == "storage"


def test_a_bundle_carried_in_the_plan_needs_no_upload(start_agent, tmp_path) -> None:
    # the pool's tasks carry a small bundle (NodeProfile.inline_code_max): no round trip
    bundle = _bundle(tmp_path)
    data = base64.b64encode(bundle.path.read_bytes()).decode()
    client = start_agent(
        _plan(tmp_path, bundle, inline=data), launch=NodeLaunch(root=str(tmp_path / "node"))
    )
    done = client.wait_finished()
    assert done["phase"] == "succeeded", done["reason"]
    assert done["code"]["source"] == "plan"
    # bytes that are not the bundle's: refused, the attempt fails saying so
    wrong = base64.b64encode(b"x" * bundle.size).decode()
    other = tmp_path / "other"
    other.mkdir()
    client = start_agent(
        _plan(other, bundle, inline=wrong), launch=NodeLaunch(root=str(other / "node"))
    )
    done = client.wait_finished()
    assert done["phase"] == "failed" and "sha256" in done["reason"], done


def test_a_bundle_missing_from_storage_is_awaited_from_the_controller(
    start_agent, tmp_path
) -> None:
    bundle = _bundle(tmp_path)
    plan = _plan(tmp_path, bundle, storage=f"file://{tmp_path}/nowhere/b.tar.gz")
    client = start_agent(plan, launch=NodeLaunch(root=str(tmp_path / "node")))
    client.wait_until(lambda s: s["code"]["state"] == "waiting")
    assert _put(client.url, bundle.sha256, 0, bundle.path.read_bytes()).status_code == 200
    done = client.wait_finished()
    assert done["phase"] == "succeeded" and done["code"]["source"] == "upload"


def test_a_stop_while_waiting_for_code_stops_the_attempt(start_agent, tmp_path) -> None:
    bundle = _bundle(tmp_path)
    client = start_agent(_plan(tmp_path, bundle), launch=NodeLaunch(root=str(tmp_path / "n")))
    client.wait_until(lambda s: s["code"]["state"] == "waiting")
    client.post("/stop")
    done = client.wait_finished()
    assert done["phase"] == "stopped" and done["stages"][0]["state"] == "cancelled"
