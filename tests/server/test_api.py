"""The HTTP API against a real uvicorn on loopback: a tiny job submitted, listed, shown and
its logs followed over server-sent events to the end; a sleeping run stopped; bad specs and
malformed requests answered 422 with the field named; unknown runs 404, ended runs 409."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from server.conftest import Api
from support.waiting import wait_until


def submit(client: httpx.Client, spec: str, workdir: Path) -> dict[str, Any]:
    res = client.post("/api/v1/runs", json={"spec": spec, "base_dir": str(workdir)})
    assert res.status_code == 201, res.text
    return res.json()["run"]


def follow(client: httpx.Client, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every server-sent event of the run's log stream, as (event, data), until it closes."""
    events: list[tuple[str, dict[str, Any]]] = []
    event = ""
    with client.stream("GET", f"/api/v1/runs/{run_id}/logs/stream", timeout=90) as res:
        assert res.status_code == 200 and res.headers["content-type"].startswith(
            "text/event-stream"
        )
        for line in res.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                events.append((event, json.loads(line.split(":", 1)[1])))
    return events


def test_a_tiny_job_is_submitted_listed_shown_and_its_logs_followed_to_the_end(
    api: Api, tmp_path: Path
) -> None:
    with api.client(api.token) as c:
        run = submit(c, 'name: hello\nrun: "echo hi"\n', tmp_path)
        assert run["name"] == "hello" and run["state"] in {"PROVISIONING", "RUNNING", "SUCCEEDED"}

        events = follow(c, run["id"])
        assert ("log", {"attempt": 1, "stage": "main", "ts": events[0][1]["ts"], "text": "hi"}) in (
            events
        )
        assert events[-1][0] == "end" and events[-1][1]["state"] == "SUCCEEDED"

        listed = c.get("/api/v1/runs", params={"state": "succeeded"}).json()
        assert [r["id"] for r in listed["runs"]] == [run["id"]]
        assert c.get("/api/v1/runs", params={"state": "RUNNING"}).json()["runs"] == []
        assert c.get("/api/v1/runs", params={"offset": 1}).json()["runs"] == []

        shown = c.get(f"/api/v1/runs/{run['id']}").json()
        assert shown["state"] == "SUCCEEDED" and [a["number"] for a in shown["attempts"]] == [1]
        assert shown["stages"][0]["state"] == "succeeded"

        files = c.get(f"/api/v1/runs/{run['id']}/logs").json()["files"]
        assert [(f["attempt"], f["stage"]) for f in files] == [(1, "main")]
        chunk = c.get(f"/api/v1/runs/{run['id']}/logs", params={"stage": "main"}).json()
        assert chunk["text"].rstrip().endswith("hi") and chunk["eof"]

        page = c.get(f"/api/v1/runs/{run['id']}/events", params={"type": "run.state"}).json()
        assert [e["data"]["to"] for e in page["events"]][-1] == "SUCCEEDED"
        later = c.get(f"/api/v1/runs/{run['id']}/events", params={"after": page["cursor"]})
        assert later.status_code == 200

        # an ended run cannot be stopped: 409 with the error's code
        ended = c.post(f"/api/v1/runs/{run['id']}/stop")
        assert ended.status_code == 409 and ended.json()["code"] == "conflict"


def test_a_sleeping_run_is_stopped_over_the_api(api: Api, tmp_path: Path) -> None:
    with api.client(api.token) as c:
        run = submit(c, 'name: sleeper\nrun: "sleep 30"\n', tmp_path)

        def state() -> str:
            return str(c.get(f"/api/v1/runs/{run['id']}").json()["state"])

        wait_until(lambda: state() == "RUNNING", 60, 0.2, "the run to be RUNNING")
        res = c.post(f"/api/v1/runs/{run['id']}/stop")
        assert res.status_code == 200 and res.json()["requested_action"] == "stop"
        wait_until(lambda: state() == "STOPPED", 60, 0.2, lambda: f"STOPPED, not {state()}")


def test_a_bad_spec_is_a_422_naming_the_field_and_nothing_is_recorded(
    api: Api, tmp_path: Path
) -> None:
    with api.client(api.token) as c:
        res = c.post(
            "/api/v1/runs",
            json={"spec": "name: x\nrun: echo\nlimits: {max_runtime: banana}\n"},
        )
        assert res.status_code == 422
        body = res.json()
        assert body["code"] == "spec_invalid" and "limits.max_runtime" in body["message"]
        assert [e["field"] for e in body["fields"]["errors"]] == ["limits.max_runtime"]

        bad_override = c.post(
            "/api/v1/runs",
            json={"spec": "name: x\nrun: echo\n", "overrides": ["nope"], "base_dir": str(tmp_path)},
        )
        assert bad_override.status_code == 422
        assert c.get("/api/v1/runs").json()["runs"] == []


def test_malformed_requests_are_4xx_never_5xx(api: Api) -> None:
    with api.client(api.token) as c:
        missing = c.post("/api/v1/runs", json={"overrides": []})
        assert missing.status_code == 422 and missing.json()["fields"]["errors"][0]["field"] == (
            "spec"
        )
        not_json = c.post(
            "/api/v1/runs", content=b"{nope", headers={"Content-Type": "application/json"}
        )
        assert not_json.status_code == 422 and not_json.json()["code"] == "bad_input"
        extra = c.post("/api/v1/runs", json={"spec": "name: x\nrun: echo\n", "bogus": 1})
        assert extra.status_code == 422
        assert c.get("/api/v1/runs", params={"limit": 0}).status_code == 422
        assert c.get("/api/v1/runs", params={"limit": "many"}).status_code == 422
        assert c.get("/api/v1/runs", params={"state": "NAPPING"}).status_code == 422
        unknown = c.get("/api/v1/runs/nosuchrun")
        assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
        for path in ("/logs", "/logs/stream", "/events", "/stop", "/cancel"):
            method = "POST" if path in {"/stop", "/cancel"} else "GET"
            assert c.request(method, f"/api/v1/runs/nosuchrun{path}").status_code == 404


def test_secrets_are_listed_by_name_and_date_never_value(api: Api) -> None:
    from corral.service.secrets import set_secret

    set_secret("HF_TOKEN", "hf-very-secret-value")
    with api.client(api.read_only_token) as c:
        res = c.get("/api/v1/secrets")
    assert res.status_code == 200
    assert [s["name"] for s in res.json()["secrets"]] == ["HF_TOKEN"]
    assert "hf-very-secret-value" not in res.text


def test_healthz_and_the_openapi_docs_need_no_token(api: Api) -> None:
    with api.client() as c:
        assert c.get("/healthz").json()["status"] == "ok"
        assert c.get("/docs").status_code == 200
        assert "/api/v1/runs" in c.get("/openapi.json").json()["paths"]
