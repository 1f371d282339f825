"""The workdir travels from the CLI to a remote ``corral server``, as a team runs it: a CLI
subprocess with its own CORRAL_HOME packs the workdir, uploads the bundle only when the server
lacks that sha256, and the server's controller ships it to a fake-cloud machine; the workdir
is deleted once ``corral launch`` returns, so only the shipped bytes can make the run succeed.
Every request to ``/api/v1/bundles`` and every byte uploaded is counted at the server."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from corral.providers.fake import ENV_FAKE_CLOUD
from corral.server.app import create_app
from corral.service.tokens import create_token
from server.conftest import Api, serve
from support.gitserver import make_repo

pytestmark = pytest.mark.slow  # a CLI process per step, runs on a fake cloud

CLI = [sys.executable, "-m", "corral.cli"]


@dataclass
class Counted:
    """What reached ``/api/v1/bundles``: each request's method, and the bytes uploaded."""

    methods: list[str] = field(default_factory=list)
    uploaded: int = 0


def counting(app: Any, seen: Counted) -> Any:
    """``app`` behind an ASGI layer that counts the bundle requests and their body bytes."""

    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/v1/bundles/"):
            await app(scope, receive, send)
            return
        seen.methods.append(scope["method"])

        async def counted_receive() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                seen.uploaded += len(message.get("body", b""))
            return message

        await app(scope, counted_receive, send)

    return wrapped


@pytest.fixture
def server(
    corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Api, Counted]]:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({"launch_delay_s": 0.1}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))  # machines that share no file with it
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    seen = Counted()
    writer = create_token("test-writer").token
    reader = create_token("test-reader", read_only=True).token
    for url in serve(counting(create_app(), seen)):
        yield Api(url=url, token=writer, read_only_token=reader), seen


@pytest.fixture
def cli(server: tuple[Api, Counted], tmp_path: Path):
    api, _ = server
    laptop_home = tmp_path / "laptop-home"  # the CLI's own home: only its bundle cache
    laptop_home.mkdir()
    env = dict(os.environ, CORRAL_HOME=str(laptop_home), CORRAL_SERVER=api.url)
    env["CORRAL_TOKEN"] = api.token
    for var in ("CORRAL_DATABASE_URL", "CORRAL_PROVIDERS", ENV_FAKE_CLOUD):
        env.pop(var, None)

    def run(*args: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args], env=env, capture_output=True, text=True, timeout=180, cwd=cwd
        )

    yield run
    assert {p.name for p in laptop_home.iterdir()} <= {"code"}


def _laptop_job(root: Path) -> Path:
    work = root / "job"
    (work / "data").mkdir(parents=True)
    (work / "junk").mkdir()
    (work / "corral.yaml").write_text(
        "name: from-laptop\nrun: cat data/hello.txt && test ! -e junk && bash train.sh\n"
    )
    (work / "data" / "hello.txt").write_text("hello from the laptop\n")
    (work / "train.sh").write_text('echo "trained on $(wc -c < data/weights.bin) bytes"\n')
    (work / "data" / "weights.bin").write_bytes(bytes(range(256)) * 400)
    (work / "junk" / "big.tmp").write_bytes(b"x" * 10_000)
    (work / ".corralignore").write_text("junk/\n")
    return work


def _server_bundle(corral_home: Path, sha256: str) -> Path:
    return corral_home / "code" / f"{sha256}.tar.gz"


def test_the_workdir_travels_from_the_cli_and_an_unchanged_one_is_not_sent_again(
    cli, server: tuple[Api, Counted], tmp_path: Path, corral_home: Path
) -> None:
    _, seen = server
    laptop = tmp_path / "laptop"
    work = _laptop_job(laptop)
    launched = cli("launch", str(work / "corral.yaml"), "--detach", "--json")
    assert launched.returncode == 0, launched.stderr
    shutil.rmtree(laptop)  # the server can only have what the CLI sent
    run = json.loads(launched.stdout)
    assert seen.methods == ["HEAD", "PUT"]
    assert "MB uploaded to" in launched.stderr

    followed = cli("logs", "-f", run["id"])
    assert followed.returncode == 0, followed.stderr
    assert "hello from the laptop" in followed.stdout
    assert "trained on 102400 bytes" in followed.stdout
    status = json.loads(cli("status", run["id"], "--json").stdout)
    assert status["state"] == "SUCCEEDED", status.get("reason")
    code = status["code"]
    assert code["source"] == "workdir" and code["members"] == 5  # junk/ stayed home
    bundle = _server_bundle(corral_home, code["sha256"])
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == code["sha256"]
    assert seen.uploaded == bundle.stat().st_size == code["size"]
    index = json.loads((corral_home / "code" / "index.json").read_text())
    assert list(index) == [f"upload:{code['sha256']}"]  # the server packed nothing itself

    # the same files again, written anew (new times): the same bundle, so nothing is sent
    work = _laptop_job(laptop)
    again = cli("launch", str(work / "corral.yaml"), "--wait", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["state"] == "SUCCEEDED"
    assert seen.methods == ["HEAD", "PUT", "HEAD"]
    assert seen.uploaded == code["size"]
    assert "has it already, nothing uploaded" in again.stderr
    second = json.loads(cli("status", json.loads(again.stdout)["id"], "--json").stdout)
    assert second["code"]["sha256"] == code["sha256"]


def test_a_workdir_over_the_limit_is_refused_by_the_cli_before_any_upload(
    cli, server: tuple[Api, Counted], tmp_path: Path
) -> None:
    _, seen = server
    work = tmp_path / "big"
    (work / "data").mkdir(parents=True)
    (work / "corral.yaml").write_text("name: big\nrun: ls\ncode: {max_size: 1MB}\n")
    (work / "data" / "shard.bin").write_bytes(os.urandom(1_500_000))
    refused = cli("launch", str(work / "corral.yaml"), "--detach")
    assert refused.returncode == 2, refused.stderr
    assert "over code.max_size" in refused.stderr and "largest: data/ (1.5 MB)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert seen.methods == [] and seen.uploaded == 0
    assert json.loads(cli("ls", "--json").stdout) == []


def test_the_server_keeps_only_a_bundle_whose_sha256_is_right_and_only_from_a_writer(
    server: tuple[Api, Counted], corral_home: Path
) -> None:
    api, _ = server
    data = b"not really a tarball, but bytes all the same" * 100
    good = hashlib.sha256(data).hexdigest()
    wrong = hashlib.sha256(b"something else").hexdigest()
    with api.client(api.token) as http:
        bad = http.put(f"/api/v1/bundles/{wrong}", params={"size": len(data)}, content=data)
        assert bad.status_code == 422
        body = bad.json()
        assert (
            body["message"].startswith("bundle checksum mismatch") and "\n" not in body["message"]
        )
        assert http.head(f"/api/v1/bundles/{wrong}").status_code == 404
        short = http.put(f"/api/v1/bundles/{good}", params={"size": len(data) + 1}, content=data)
        assert short.status_code == 422 and "ended at" in short.json()["message"]
        odd = http.head("/api/v1/bundles/not-a-sha")
        assert odd.status_code == 422
        assert [p.name for p in (corral_home / "code").iterdir()] == []  # nothing half-kept

        ok = http.put(f"/api/v1/bundles/{good}", params={"size": len(data)}, content=data)
        assert ok.status_code == 200 and ok.json() == {"sha256": good, "size": len(data)}
        held = http.head(f"/api/v1/bundles/{good}")
        assert held.status_code == 200 and held.headers["X-Corral-Bundle-Size"] == str(len(data))
    assert _server_bundle(corral_home, good).read_bytes() == data
    with api.client(api.read_only_token) as http:
        put = http.put(f"/api/v1/bundles/{wrong}", params={"size": 1}, content=b"x")
        assert put.status_code == 403 and "read-only" in put.json()["message"]
        assert http.head(f"/api/v1/bundles/{good}").status_code == 403
    with api.client() as http:
        assert http.head(f"/api/v1/bundles/{good}").status_code == 401


def test_a_submit_naming_a_bundle_the_server_lacks_is_refused_naming_it(
    server: tuple[Api, Counted], tmp_path: Path
) -> None:
    api, _ = server
    missing = "ab" * 32
    body = {
        "spec": "name: x\nrun: ls\n",
        "base_dir": str(tmp_path / "nowhere"),
        "code": {"sha256": missing},
    }
    with api.client(api.token) as http:
        got = http.post("/api/v1/runs", json=body)
    assert got.status_code == 422
    assert f"the bundle {missing[:12]} is not on the server" in got.json()["message"]


def test_code_from_git_uploads_nothing(cli, server: tuple[Api, Counted], tmp_path: Path) -> None:
    _, seen = server
    bare, checkout = make_repo(tmp_path / "repos", {"job.sh": "echo cloned from git\n"})
    (checkout / "corral.yaml").write_text(
        f"name: from-git\nrun: bash job.sh\ncode: {{git: 'file://{bare}', ref: main}}\n"
    )
    launched = cli("launch", str(checkout / "corral.yaml"), "--detach", "--json")
    assert launched.returncode == 0, launched.stderr
    shutil.rmtree(checkout)
    run = json.loads(launched.stdout)
    followed = cli("logs", "-f", run["id"])
    assert "cloned from git" in followed.stdout, followed.stderr
    status = json.loads(cli("status", run["id"], "--json").stdout)
    assert status["state"] == "SUCCEEDED" and status["code"]["source"] == "git"
    assert seen.methods == [] and seen.uploaded == 0


def _on_a_terminal(cli_env: dict[str, str], args: list[str], cwd: Path) -> tuple[int, str]:
    """Run the CLI with its stderr on a pseudo-terminal; (exit code, what it wrote there)."""
    master, slave = pty.openpty()
    out: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the other end closed
                return
            if not data:
                return
            out.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = subprocess.run(
            [*CLI, *args],
            env=dict(cli_env, TERM="xterm", COLUMNS="100"),
            stdout=subprocess.PIPE,
            stderr=slave,
            timeout=180,
            cwd=cwd,
        )
    finally:
        os.close(slave)
    reader.join(10)
    os.close(master)
    return done.returncode, b"".join(out).decode("utf-8", "replace")


def test_a_terminal_shows_the_upload_progress_and_json_mode_shows_none(
    server: tuple[Api, Counted], tmp_path: Path
) -> None:
    api, seen = server
    env = dict(os.environ, CORRAL_HOME=str(tmp_path / "laptop-home"), CORRAL_SERVER=api.url)
    env["CORRAL_TOKEN"] = api.token
    for var in ("CORRAL_DATABASE_URL", "CORRAL_PROVIDERS", ENV_FAKE_CLOUD):
        env.pop(var, None)
    work = tmp_path / "job"
    work.mkdir()
    (work / "corral.yaml").write_text("name: bar\nrun: ls\n")
    (work / "weights.bin").write_bytes(os.urandom(3_000_000))  # a few upload chunks
    code, shown = _on_a_terminal(env, ["launch", "corral.yaml", "--detach"], work)
    assert code == 0, shown
    assert "packing the workdir" in shown and "uploading the workdir" in shown
    assert seen.methods == ["HEAD", "PUT"] and seen.uploaded > 3_000_000

    (work / "more.bin").write_bytes(os.urandom(1_000_000))
    code, shown = _on_a_terminal(env, ["launch", "corral.yaml", "--detach", "--json"], work)
    assert code == 0, shown
    assert "packing" not in shown and "uploading" not in shown
    assert seen.methods == ["HEAD", "PUT", "HEAD", "PUT"]


def test_code_from_git_sends_only_its_files(
    cli, server: tuple[Api, Counted], tmp_path: Path
) -> None:
    _, seen = server
    bare, checkout = make_repo(tmp_path / "repos", {"job.sh": "cat conf/lr.toml\n"})
    settings = tmp_path / "laptop" / "lr.toml"
    settings.parent.mkdir()
    settings.write_text("lr = 0.25\n")
    (checkout / "corral.yaml").write_text(
        f"name: git-files\nrun: bash job.sh\ncode: {{git: 'file://{bare}'}}\n"
        f"files: {{conf/lr.toml: {settings}}}\n"
    )
    launched = cli("launch", str(checkout / "corral.yaml"), "--detach", "--json")
    assert launched.returncode == 0, launched.stderr
    shutil.rmtree(checkout)
    shutil.rmtree(settings.parent)
    run = json.loads(launched.stdout)
    assert "lr = 0.25" in cli("logs", "-f", run["id"]).stdout
    status = json.loads(cli("status", run["id"], "--json").stdout)
    assert status["state"] == "SUCCEEDED" and status["code"]["members"] == 1  # files/0 only
    assert seen.methods == ["HEAD", "PUT"] and seen.uploaded == status["code"]["size"]


def test_a_server_that_runs_jobs_on_its_own_disk_refuses_a_workdir_it_cannot_see(
    api: Api, tmp_path: Path
) -> None:
    data = b"bundle bytes"
    sha = hashlib.sha256(data).hexdigest()
    body = {
        "spec": "name: here\nrun: ls\n",
        "base_dir": str(tmp_path / "only-on-the-laptop"),
        "code": {"sha256": sha, "members": 1},
    }
    with api.client(api.token) as http:
        assert http.put(f"/api/v1/bundles/{sha}", params={"size": 12}, content=data).is_success
        got = http.post("/api/v1/runs", json=body)
        assert got.status_code == 422
        assert "is not on the server" in got.json()["message"]
        assert http.get("/api/v1/runs").json()["runs"] == []
