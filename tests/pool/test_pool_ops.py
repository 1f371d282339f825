"""Watching the pool: ``corral pool status``, the queue-length hook of ``corral pool watch``
(a command and a signed webhook) and ``corral pool monitor`` (Flower with authentication), on
the local Redis server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.notify.signing import HEADER_SIGNATURE, HEADER_TIMESTAMP, verify
from corral.providers.base import Bootstrap, Requirements
from corral.providers.pool import PoolProvider
from corral.queue.client import connect
from corral.queue.keys import Keys
from corral.queue.registry import Registry, WorkerInfo
from corral.queue.settings import PoolSettings
from providers.contract import new_key, trivial_plan
from support.pool import pool_env, scratch_pool
from support.waiting import wait_until


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[PoolSettings]:
    with scratch_pool() as settings:
        for name, value in pool_env(settings).items():
            monkeypatch.setenv(name, value)
        yield settings


def _worker(settings: PoolSettings, name: str, queue: str, key: str = "") -> None:
    """A worker's record, as a live worker keeps it (no Celery process: nothing consumes)."""
    registry = Registry(connect(settings), Keys(settings.name))
    info = WorkerInfo(
        name=name,
        host="box",
        pid=4242,
        queue=queue,
        gpu_type="L40S",
        gpus=["0"],
        cpus=8,
        memory_gb=64.0,
        started_at=time.time(),
    )
    registry.register(info, ttl_s=60)
    if key:
        registry.set_current(name, 60, key, key.rsplit("-a", 1)[0])


def _queue_two(settings: PoolSettings, tmp_path: Path) -> str:
    queue = Keys(settings.name).queue("L40S", 1)
    _worker(settings, "box-gpu0", queue, key="busy1-a1")
    provider = PoolProvider(settings)
    offer = provider.offers(Requirements(gpu_count_min=1, gpu_count_max=1))[0]
    for _ in range(2):
        key = new_key()
        boot = Bootstrap(plan=trivial_plan(tmp_path, key), token="t-" + uuid.uuid4().hex)
        provider.launch(offer, boot, key)
    return queue


def test_pool_status_shows_workers_their_runs_and_queue_lengths(
    pool: PoolSettings, tmp_path: Path
) -> None:
    runner = CliRunner()
    empty = runner.invoke(app, ["pool", "status"])
    assert empty.exit_code == 0 and "no worker has joined yet" in empty.output
    queue = _queue_two(pool, tmp_path)
    out = runner.invoke(app, ["pool", "status", "--json"])
    assert out.exit_code == 0, out.output
    view = json.loads(out.stdout)
    assert view["pool"] == pool.name
    [worker] = view["workers"]
    assert (worker["name"], worker["gpus"], worker["run_id"]) == ("box-gpu0", ["0"], "busy1")
    [q] = view["queues"]
    assert (q["queue"], q["workers"], q["busy"], q["waiting"], q["delta"]) == (queue, 1, 1, 2, 2)
    table = runner.invoke(app, ["pool", "status"]).stdout
    assert "box-gpu0" in table and "busy1" in table and queue in table
    # what corral server's /metrics shows as corral_queue_length (ReportsQueue)
    assert PoolProvider(pool).queue_lengths() == {queue: 2}


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """No access log on the test's stderr."""


def test_the_queue_length_hook_calls_a_command_and_a_signed_webhook(
    pool: PoolSettings, tmp_path: Path, monkeypatch
) -> None:
    queue = _queue_two(pool, tmp_path)
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    _Receiver.got = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SCALE_HOOK_SECRET", "s3cret-value")
    out = tmp_path / "hook.txt"
    try:
        result = CliRunner().invoke(
            app,
            [
                "pool",
                "watch",
                "--once",
                "--command",
                f'echo "$CORRAL_POOL_QUEUE $CORRAL_POOL_WAITING $CORRAL_POOL_WORKERS '
                f'$CORRAL_POOL_DELTA" >> {out}',
                "--url",
                f"http://127.0.0.1:{server.server_port}/scale",
                "--secret",
                "SCALE_HOOK_SECRET",
            ],
        )
    finally:
        server.shutdown()
    assert result.exit_code == 0, result.output
    assert out.read_text() == f"{queue} 2 1 2\n"
    [(headers, body)] = _Receiver.got
    verify("s3cret-value", headers[HEADER_TIMESTAMP], body, headers[HEADER_SIGNATURE])
    event = json.loads(body)
    assert event["type"] == "pool.queue" and event["data"]["waiting"] == 2
    assert event["data"]["delta"] == 2
    nothing = CliRunner().invoke(app, ["pool", "watch", "--once"])
    assert nothing.exit_code == 2 and "--command" in nothing.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_flower_runs_with_authentication_on(pool: PoolSettings, monkeypatch) -> None:
    from corral.service.pool import monitor_command

    refused = CliRunner().invoke(app, ["pool", "monitor"])
    assert refused.exit_code == 2 and "CORRAL_FLOWER_PASSWORD" in refused.output
    monkeypatch.setenv("CORRAL_FLOWER_PASSWORD", "flower-pass-1")
    monkeypatch.setenv("FLOWER_UNAUTHENTICATED_API", "1")  # never passed on to Flower
    port = _free_port()
    argv, env = monitor_command(pool, port=port)
    assert "flower-pass-1" not in " ".join(argv)  # not in `ps`
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                return httpx.get(url + "/healthcheck", timeout=2).status_code in (200, 401)
            except httpx.TransportError:
                return False

        wait_until(up, 60, 0.2, "Flower to listen")
        assert httpx.get(url + "/api/workers", timeout=10).status_code == 401
        assert httpx.get(url + "/", timeout=10).status_code == 401
        ok = httpx.get(url + "/api/workers", auth=("corral", "flower-pass-1"), timeout=30)
        assert ok.status_code == 200
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert os.environ["FLOWER_UNAUTHENTICATED_API"] == "1"
