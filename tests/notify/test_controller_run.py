"""A real short run through the controller (local provider, real agent), its events delivered
by the controller's own dispatcher to a receiver on loopback."""

from __future__ import annotations

import json

import pytest
from hookkit import SECRET

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.notify.payloads import WEBHOOK_EVENTS
from corral.store import Store

pytestmark = pytest.mark.slow

TRAIN = (
    'python -c "from corral.sdk.progress_file import emit; '
    "emit('progress', step=5, total=10, loss=0.5); "
    "emit('checkpoint', step=10, path='ckpt-10', metrics={'loss': 0.4})\" && sleep 1"
)


def test_a_real_run_is_delivered_in_order_and_signed(tmp_path, receivers, monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    rx = receivers(secret=SECRET, tolerance=300)
    spec = write_spec(
        tmp_path,
        f"""
        name: hooked
        stages:
          - name: train
            run: {json.dumps(TRAIN)}
        notify:
          webhooks:
            - url: {rx.url}
              secret: HOOK_SECRET
              progress_interval: 1s
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    proc = start_controller()  # the controller starts the dispatcher (HOOK_SECRET is inherited)
    try:
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"})
        assert run.state == "SUCCEEDED", run.reason
        expected = [e.type for e in store.events(run_id) if e.type in WEBHOOK_EVENTS]
        rx.wait_for(len(expected), timeout=10)
    finally:
        proc.terminate()
        proc.wait(10)
    assert rx.types() == expected
    for wanted in (
        "run.started",
        "stage.started",
        "progress",
        "checkpoint.saved",
        "stage.finished",
        "run.finished",
    ):
        assert wanted in expected
    assert all(r.signature_ok for r in rx.accepted())
    progress = next(r.json for r in rx.accepted() if r.type == "progress")
    assert progress["data"]["step"] == 5 and progress["data"]["total"] == 10
    assert progress["data"]["stage"] == "train" and "cost_usd" in progress["data"]
    assert rx.accepted()[-1].json["data"]["state"] == "SUCCEEDED"
    # how the run ended, from the last attempt's recorded outcome
    assert rx.accepted()[-1].json["data"]["outcome"] == {
        "kind": "succeeded",
        "cause": None,
        "exit_code": None,
        "failed_stage": None,
    }
    assert SECRET not in b"".join(r.body for r in rx.accepted()).decode()
