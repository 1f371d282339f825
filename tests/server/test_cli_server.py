"""``corral server`` as a user starts it: a subprocess serving on loopback, a background
controller started beside it, CORS only for the origins given."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from corral.service.controller import controller_status
from server.conftest import free_port
from support.waiting import wait_until

CLI = [sys.executable, "-m", "corral.cli"]


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_corral_server_serves_the_api_and_starts_a_controller(corral_home: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*CLI, "server", "--port", str(port), "--cors-origin", "https://dash.example"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: healthy(url) or proc.poll() is not None, 30, 0.1, "the server")
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        assert controller_status().running
        assert httpx.get(f"{url}/api/v1/runs").status_code == 401
        preflight = httpx.options(
            f"{url}/api/v1/runs",
            headers={"Origin": "https://dash.example", "Access-Control-Request-Method": "GET"},
        )
        assert preflight.headers["access-control-allow-origin"] == "https://dash.example"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(15)


def test_a_bad_gpu_threshold_is_one_line_before_anything_starts(corral_home: Path) -> None:
    done = subprocess.run(
        [*CLI, "server", "--gpu-threshold", "temperature_warn_c=hot"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --gpu-threshold: temperature_warn_c: Input should be a valid number, "
        "unable to parse string as a number"
    ]
    assert not controller_status().running
