"""What the controller copies from an agent (its status, events, progress metrics, manifest,
the attempt's end) holds no secret value once stored or shown, even for a controller that did
not launch the run (the spec's ``secrets:`` are known only by name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from control.unitkit import rig
from corral.control.controller import reconcile
from corral.service.details import get_run
from corral.service.runs import list_runs
from corral.store.states import RunState
from corral.wire.status import AgentStatus

SECRET = "plain-Vq93xZ-secret"  # an env value under a name no pattern marks as secret


def _leaky_status(phase: str, reason: str = "") -> AgentStatus:
    progress = {
        "step": 3,
        "total": 10,
        "loss": 0.5,
        "note": f"token={SECRET}",  # report(step, note=os.environ[...])
        "metrics": {"value": SECRET, SECRET: 1.0},  # as a value and as a metric name
    }
    return AgentStatus.model_validate(
        {
            "wire_version": 1,
            "run_id": "r",
            "attempt": 1,
            "phase": phase,
            "reason": reason,
            "stages": [{"name": "main", "state": "running", "progress": progress}],
            "last_checkpoint": {"step": 3, "path": f"/ckpt/{SECRET}"},
            "manifest": {"files": [{"name": f"model-{SECRET}.pt"}]},  # a hook's extra key
        }
    )


def _events() -> dict[str, Any]:
    return {
        "events": [
            {
                "seq": 1,
                "ts": "2026-01-01T00:00:00Z",
                "type": "progress",
                "stage": "main",
                "data": {"step": 3, "note": SECRET, "metrics": {SECRET: SECRET}},
            },
            {
                "seq": 2,
                "ts": "2026-01-01T00:00:01Z",
                "type": "stage.log",
                "stage": "main",
                "data": {"message": f"leaked {SECRET}"},
            },
        ],
        "next": 2,
    }


def test_agent_status_events_and_outcome_are_stored_and_shown_without_secret_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNREMARKABLE_NAME", SECRET)
    r = rig(tmp_path, RunState.RUNNING, spec_extra="secrets: [UNREMARKABLE_NAME]\n")
    statuses = [_leaky_status("running")]
    r.agent.status = lambda: statuses[-1]  # type: ignore[method-assign]
    r.agent.events = lambda after=0: _events() if after < 2 else {"events": []}  # type: ignore[method-assign]

    reconcile(r.ctx, r.run())
    attempt = r.store.get_attempt(r.run_id, 1)
    assert attempt.data["status"]["stages"][0]["progress"]["step"] == 3  # copied
    statuses.append(_leaky_status("failed", reason=f"stage 'main' failed: {SECRET}"))
    for _ in range(3):
        reconcile(r.ctx, r.run())
    run = r.run()
    assert run.state == RunState.FAILED

    shown = [
        json.dumps(run.to_dict(), default=str),
        json.dumps([a.to_dict() for a in r.store.attempts(r.run_id)], default=str),
        json.dumps([e.to_dict() for e in r.store.events(r.run_id)], default=str),
        json.dumps(get_run(r.run_id, store=r.store).to_json(), default=str),
        json.dumps([v.to_json() for v in list_runs(store=r.store)], default=str),
    ]
    hits = sum(text.count(SECRET) for text in shown)
    print(f"secret values found in stored and shown agent data: {hits}")
    assert hits == 0
    assert "***" in shown[1]  # masked, not dropped
