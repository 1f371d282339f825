"""Helpers for the webhook tests: a fake clock, runs with webhooks, a simulated run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from corral.store import Store

SECRET = "s3cr3t-value-for-tests"


class FakeClock:
    """Unix seconds for the dispatcher (``clock()``), the same instant as a datetime for the
    store (``clock.dt()``); ``advance`` moves both."""

    def __init__(self, start: float = 1_800_000_000.0):
        self.t = start

    def __call__(self) -> float:
        return self.t

    def dt(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t


def hooked_run(store: Store, *webhooks: dict[str, Any], name: str = "hooked") -> str:
    """A run whose spec has these ``notify.webhooks`` entries."""
    spec = {
        "name": name,
        "stages": [{"name": "train", "run": "python train.py"}],
        "notify": {"webhooks": list(webhooks)},
    }
    return store.create_run(
        name=name, spec=spec, spec_hash="h", spec_path="/jobs/x.yaml", workdir="/jobs"
    ).id


def simulate_run(store: Store, run_id: str, clock: FakeClock) -> list[str]:
    """Write the events of a short run as the controller would; returns the webhook-visible
    types in order."""
    steps: list[tuple[str, dict[str, Any]]] = [
        ("run.state", {"from": "PENDING", "to": "PROVISIONING"}),
        ("run.started", {}),
        ("stage.started", {"stage": "train", "gpus": ["0"], "pid": 41}),
        ("progress", {"stage": "train", "step": 5, "total": 10, "percent": 50.0, "loss": 1.5}),
        ("checkpoint.saved", {"stage": "train", "step": 10, "path": "/ckpt/ckpt-10"}),
        ("stage.finished", {"stage": "train", "state": "succeeded", "exit_code": 0}),
        ("controller.note", {"message": "not a webhook"}),
        ("run.finished", {"state": "SUCCEEDED", "cost_usd": 0.25}),
    ]
    for type_, data in steps:
        store.add_event(run_id, type_, f"{type_} happened", data=data, attempt=1)
        clock.advance(1)
    return [t for t, _ in steps if t not in ("run.state", "controller.note")]
