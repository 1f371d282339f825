"""Spending caps across runs on a team server with two tokens, end to end: real uvicorn, real
controller, real local agents billed at $0.10 a second. Caps per user and per project set
through the API; a launch that would pass a cap refused with one line naming it and what is
left; running runs stopped gracefully at the cap, the most recently started first; spend per
cap in the API; the warning event at the cap's ``warn_at``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.service.tokens import create_token
from corral.store import Store
from server.conftest import Api
from support.waiting import wait_until

JOB = """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("saving", flush=True), sys.exit(75)))
print("up", flush=True)
while True:
    time.sleep(0.1)
"""


def _spec(tmp_path: Path, name: str, budget: float, project: str | None = None) -> str:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    lines = [f"name: {name}", f"budget: {{max_cost_usd: {budget}}}"]
    if project:
        lines.append(f"project: {project}")
    lines.append(f"run: {sys.executable} {script}")
    return "\n".join(lines) + "\n"


def _launch(client: httpx.Client, tmp_path: Path, spec: str) -> httpx.Response:
    return client.post("/api/v1/runs", json={"spec": spec, "base_dir": str(tmp_path)})


def _run(client: httpx.Client, run_id: str) -> dict[str, Any]:
    got = client.get(f"/api/v1/runs/{run_id}")
    assert got.status_code == 200, got.text
    return dict(got.json())


def _caps(client: httpx.Client) -> dict[tuple[str, str], dict[str, Any]]:
    got = client.get("/api/v1/budget")
    assert got.status_code == 200, got.text
    return {(c["scope"], c["subject"]): c for c in got.json()["caps"]}


@pytest.mark.slow
def test_caps_per_user_and_project_refuse_launches_and_stop_running_runs(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_LOCAL_PRICE_PER_HOUR", "360")  # $0.10 a second
    alice, bob = create_token("alice").token, create_token("bob").token
    with api.client(alice) as a, api.client(bob) as b, api.client(api.read_only_token) as r:
        # bob's two runs start before any cap exists
        first = _launch(b, tmp_path, _spec(tmp_path, "bob-first", 20))
        assert first.status_code == 201, first.text
        started = first.json()["run"]["id"]
        wait_until(lambda: _run(r, started)["state"] == "RUNNING", 60, 0.2, "the first running")
        second = _launch(b, tmp_path, _spec(tmp_path, "bob-second", 20))
        assert second.status_code == 201, second.text
        ids = [first.json()["run"]["id"], second.json()["run"]["id"]]
        wait_until(
            lambda: all(_run(r, i)["state"] == "RUNNING" for i in ids), 60, 0.2, "both running"
        )
        # a read-only token cannot set a cap; alice (a writer) can, for bob and for a project
        denied = r.post("/api/v1/budget", json={"scope": "team", "amount_usd": 1})
        assert denied.status_code == 403
        got = a.post(
            "/api/v1/budget",
            json={"scope": "user", "subject": "bob", "amount_usd": 4.0, "warn_at": 0.5},
        )
        assert got.status_code == 200, got.text
        assert got.json()["set_by"] == "alice" and got.json()["live_runs"] == 2
        got = a.post("/api/v1/budget", json={"scope": "project", "subject": "llm", "amount_usd": 2})
        assert got.status_code == 200, got.text

        # a launch whose expected cost (its budget) would pass the project's cap: one line
        refused = _launch(a, tmp_path, _spec(tmp_path, "alice-llm", 3, project="llm"))
        assert refused.status_code == 409, refused.text
        body = refused.json()
        assert body["code"] == "spending_cap"
        assert "spending cap of project 'llm' ($2.00, " in body["message"]
        assert "$2.00 left" in body["message"] and "$3.00 (its budget)" in body["message"]
        assert "\n" not in body["message"]
        # alice's own run within the project's cap goes
        mine = _launch(a, tmp_path, _spec(tmp_path, "alice-llm", 0.5, project="llm"))
        assert mine.status_code == 201, mine.text

        # bob's runs are stopped at his cap: the newer first, the older last
        wait_until(lambda: all(_run(r, i)["state"] == "STOPPED" for i in ids), 90, 0.2, "stops")
        store = Store.open()
        stops = {}
        for run_id in ids:
            run = store.get_run(run_id)
            assert run.reason == "budget", run.reason
            [stop] = store.events(run_id, types=["budget.stop"])
            assert stop.data["by"] == "cap" and stop.data["cap"]["subject"] == "bob"
            stops[run_id] = stop.ts
        assert stops[ids[1]] < stops[ids[0]]
        assert store.events(ids[0], types=["budget.cap_warning"])
        wait_until(lambda: _caps(r)[("user", "bob")]["live_runs"] == 0, 30, 0.2, "no live run")
        caps = _caps(r)
        spent = caps[("user", "bob")]["spent_usd"]
        bills = sum(store.get_run(i).cost_usd for i in ids)
        assert abs(spent - bills) < 0.05, (spent, bills)
        assert 0 < spent <= 4.0, spent  # never over the cap
        assert caps[("project", "llm")]["spent_usd"] < 0.6  # alice's run only

        # the dashboard shows spend against each cap above the runs
        with httpx.Client(base_url=api.url, cookies={"corral_token": alice}) as page:
            html = page.get("/ui/runs").text
        assert "CAP · USER bob · " in html and "/ $4.00" in html
        assert "CAP · PROJECT llm · " in html

        # and bob cannot launch a run his cap has no room for
        again = _launch(b, tmp_path, _spec(tmp_path, "bob-third", 1))
        assert again.status_code == 409 and "user 'bob'" in again.json()["message"]
        store.close()
