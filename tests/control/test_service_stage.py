"""A service stage on the local provider: it starts once training is done, answers through
the agent's port at the URL `corral status` shows (its health too), keeps the run RUNNING
after the training stage ended, and is gone after `corral stop`, which ends the run SUCCEEDED."""

from __future__ import annotations

import socket
import sys

import httpx
import pytest

from corral.service.actions import stop_run
from corral.service.details import get_run
from corral.store import Store
from support.waiting import wait_until

from .helpers import start_controller, submit, wait_for, write_spec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_service_stage_serves_after_training_and_is_gone_after_stop(tmp_path):
    port = _free_port()
    spec = write_spec(
        tmp_path,
        f"""
        name: serving
        resources: {{providers: [local]}}
        stages:
          - name: train
            run: echo trained-weights > model.txt
          - name: serve
            needs: [train]
            run: exec {sys.executable} -m http.server {port} --bind 127.0.0.1
            service: {{ports: [{port}], health: /model.txt}}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    proc = start_controller()
    try:

        def serving():
            run = get_run(run_id)
            svc = (run.services or [None])[0]
            return run if svc and svc.get("url") and svc.get("healthy") else None

        run = wait_until(serving, timeout=60, message="a healthy service with its URL")
        assert run.state == "RUNNING"
        assert "train" in (store.get_run(run_id).completed_stages or [])
        [svc] = run.services or []
        url = svc["url"]
        assert svc["stage"] == "serve" and url.endswith("/services/serve/")
        answer = httpx.get(url + "model.txt")  # no token: a public service
        assert answer.status_code == 200 and answer.text.strip() == "trained-weights"
        assert httpx.get(url.replace("/services/serve/", "/status")).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/model.txt").status_code == 200
        stop_run(run_id)
        final = wait_for(store, run_id, {"SUCCEEDED", "FAILED", "STOPPED"}, timeout=60)
    finally:
        proc.terminate()
        proc.wait(10)
    assert final.state == "SUCCEEDED", final.reason
    assert get_run(run_id).services[0]["url"] is None
    for target in (url + "model.txt", f"http://127.0.0.1:{port}/model.txt"):
        with pytest.raises(httpx.HTTPError):
            httpx.get(target, timeout=2)
