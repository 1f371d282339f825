"""GET /artifacts/<name>.tar.gz: the packaged results, token-protected, nothing else."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import tarfile
from pathlib import Path

from support.waiting import wait_until

from ..helpers import make_plan
from .helpers import fetch

RUN = (
    "mkdir -p outputs eval && echo weights > outputs/model.bin && echo tok > outputs/tok.txt"
    " && echo '{\"cer\": 0.01}' > eval/report.json && touch written && "
    "while [ ! -e go ]; do sleep 0.05; done"
)


def _plan(tmp_path: Path):
    return make_plan(
        tmp_path,
        [{"name": "train", "run": RUN}],
        artifacts={"paths": ["outputs/*"], "storage": f"file://{tmp_path}/bucket"},
        eval={
            "report": "eval/report.json",
            "acceptance": [{"metric": "cer", "op": "<", "value": 1}],
        },
    )


def _raw_get(url: str, target: str, token: str) -> bytes:
    """A request with a path exactly as written (no client-side normalisation)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        sock.sendall((head + "Connection: close\r\n\r\n").encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_results_are_404_before_and_the_packaged_manifest_and_artifacts_after(
    tmp_path, start_agent
):
    plan = _plan(tmp_path)
    client = start_agent(plan)
    work = Path(plan.workdir)
    url = client.url + "/artifacts/results.tar.gz"
    client.wait_until(lambda s: (work / "written").exists())
    status, body, headers = fetch(url)
    assert status == 404 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"error": "results.tar.gz is not packaged (yet)"}

    (work / "go").touch()
    client.wait_finished()
    wait_until(
        lambda: client.get("/status")["manifest"]["package"] == "results.tar.gz",
        10,
        0.02,
        "the results package in the manifest",
    )
    status, body, headers = fetch(url)
    assert status == 200 and headers["Content-Type"] == "application/gzip"
    assert int(headers["Content-Length"]) == len(body)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    assert sorted(members) == [
        "artifacts/eval/report.json",
        "artifacts/outputs/model.bin",
        "artifacts/outputs/tok.txt",
        "manifest.json",
    ]
    manifest = json.loads(members["manifest.json"])
    assert manifest == json.loads((Path(plan.state_dir) / "manifest.json").read_text())
    for rel, entry in manifest["files"].items():
        content = members[f"artifacts/{rel}"]
        assert content == (work / rel).read_bytes()
        assert entry == {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    assert manifest["eval"]["all_pass"] is True


def test_results_need_the_token_and_nothing_outside_the_package_is_served(tmp_path, start_agent):
    plan = _plan(tmp_path)
    (Path(plan.workdir) / "go").touch()
    client = start_agent(plan)
    client.wait_finished()
    wait_until(
        lambda: client.get("/status")["manifest"]["package"], 10, 0.02, "a package in the manifest"
    )
    url = client.url + "/artifacts/results.tar.gz"
    for token in (None, "wrong"):
        status, body, _ = fetch(url, token=token)
        assert status == 401 and json.loads(body) == {"error": "unauthorized"}
    assert fetch(client.url + "/artifacts/other.tar.gz")[0] == 404
    assert client.request("POST", "/artifacts/results.tar.gz")[0] == 405
    for target in (
        "/artifacts/../events.jsonl",
        "/artifacts/../manifest.json",
        "/artifacts/..%2Fevents.jsonl",
        "/artifacts/%2e%2e/results.tar.gz",
        "/artifacts/sub/results.tar.gz",
        "/artifacts/manifest.json",
        "/artifacts/",
    ):
        answer = _raw_get(client.url, target, client.token)
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line.split()[1] in (b"400", b"404"), (target, status_line)
        assert b"run-1" not in rest and b"attempt.started" not in rest, target
