"""The controller's upload of a bundle to an agent: off the loop, resumed after a dropped
connection from the bytes the agent has (nothing sent twice), reported once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.helpers import TOKEN, make_plan
from corral.agent.main import Agent, NodeLaunch
from corral.bundle import pack as packing
from corral.control import shipping
from corral.control.agent_client import AgentClient
from corral.errors import AgentUnreachable
from corral.wire.code import BundleRef, CodePlan
from support.waiting import wait_until


def test_an_interrupted_upload_resumes_where_the_agent_stopped_receiving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "blob.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB, little to compress
    (work / "job.sh").write_text("wc -c blob.bin\n")
    bundle = packing.pack(tmp_path / "cache", packing.collect(str(work)))
    plan = make_plan(
        tmp_path,
        [{"name": "main", "run": "bash job.sh"}],
        workdir="/work",
        code=CodePlan(bundle=BundleRef(sha256=bundle.sha256, size=bundle.size)),
    )
    agent = Agent(plan, TOKEN, launch=NodeLaunch(root=str(tmp_path / "node")))
    url = agent.start()
    client = AgentClient(url, TOKEN)
    try:
        monkeypatch.setattr(shipping, "UPLOAD_CHUNK", max(1, bundle.size // 4))
        sent: list[int] = []
        calls = [0]

        def flaky(sha: str, offset: int, data: bytes):
            calls[0] += 1
            if calls[0] == 3:  # the connection drops on the third piece
                raise AgentUnreachable("connection reset")
            sent.append(len(data))
            return client.put_code(sha, offset, data)

        uploads = shipping.Uploads()
        assert uploads.ensure("r:1", bundle.path, bundle.sha256, 0, flaky)
        uploads.wait(10)
        assert uploads.finished("r:1") is None  # stopped, not finished
        have = client.code()["received"]
        assert have == sum(sent) and 0 < have < bundle.size
        assert uploads.ensure("r:1", bundle.path, bundle.sha256, have, flaky)
        uploads.wait(10)
        assert uploads.finished("r:1") == bundle.size  # in all, over both connections
        assert uploads.finished("r:1") is None  # reported once
        assert sum(sent) == bundle.size  # no byte sent twice
        wait_until(lambda: agent.runner.finished.is_set(), 20, message="the attempt to end")
        assert agent.runner.status()["phase"] == "succeeded"
    finally:
        client.close()
        agent.close(timeout=5)
