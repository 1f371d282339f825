"""The dashboard's pages over plain HTTP (real uvicorn): the login form and its cookie, pages
and fragments refused without it, a read-only token's page with Stop and Cancel disabled,
cookie writes only with the dashboard's header, static files served from the package."""

from __future__ import annotations

from pathlib import Path

import httpx

from server.conftest import Api
from server.test_api import follow, submit


def login(api: Api, token: str) -> httpx.Client:
    c = httpx.Client(base_url=api.url, timeout=30)
    res = c.post("/login", data={"token": token, "next": "/runs/x?y=1"})
    assert res.status_code == 303 and res.headers["location"] == "/runs/x?y=1"
    cookie = res.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    return c


def test_pages_need_a_login_and_a_read_only_token_cannot_stop(api: Api, tmp_path: Path) -> None:
    anon = httpx.Client(base_url=api.url, timeout=30)
    res = anon.get("/runs/abc?x=1")
    assert res.status_code == 303 and res.headers["location"] == "/login?next=/runs/abc%3Fx%3D1"
    assert anon.get("/ui/runs").status_code == 401
    assert anon.get("/ui/runs/abc").status_code == 401
    assert anon.get("/ui/gpus").status_code == 401
    assert anon.get("/gpus").headers["location"] == "/login?next=/gpus"
    form = anon.get("/login")
    assert form.status_code == 200 and 'name="token"' in form.text
    bad = anon.post("/login", data={"token": "corral_nope"})
    assert bad.status_code == 401 and "not valid" in bad.text and "set-cookie" not in bad.headers
    evil = anon.post("/login", data={"token": api.token, "next": "//evil.example/"})
    assert evil.headers["location"] == "/"
    assert anon.post("/login", data={"token": "x" * 20_000}).status_code == 413

    with api.client(api.token) as c:
        run = submit(c, 'name: page-run\nrun: "echo from the job"\n', tmp_path)
        follow(c, run["id"])

    reader = login(api, api.read_only_token)
    table = reader.get("/")
    assert table.status_code == 200 and run["id"] in table.text and "SUCCEEDED" in table.text
    assert "(read-only)" in table.text
    page = reader.get(f"/runs/{run['name']}")
    assert page.status_code == 200 and "from the job" in page.text
    assert 'data-action="stop" disabled' in page.text
    parts = reader.get(f"/ui/runs/{run['id']}").json()
    assert parts["terminal"] and parts["state"] == "SUCCEEDED"
    assert set(parts["parts"]) == {"header", "timeline", "logs", "gpus", "results"}
    assert "Attempt 1" in parts["parts"]["timeline"]
    assert reader.get("/runs/nosuchrun").status_code == 404
    assert reader.get("/static/chart.js").status_code == 200
    assert reader.get("/static/style.css").headers["content-type"].startswith("text/css")
    # the page loads nothing from another origin
    assert "http://" not in page.text.replace(api.url, "") and "https://" not in page.text

    assert reader.post("/logout").status_code == 303
    assert reader.get("/").status_code == 303


def test_a_write_with_the_cookie_needs_the_dashboard_header(api: Api, tmp_path: Path) -> None:
    with api.client(api.token) as c:
        run = submit(c, 'name: csrf\nrun: "sleep 30"\n', tmp_path)
    browser = login(api, api.token)
    page = browser.get(f"/runs/{run['id']}")
    assert 'data-action="stop" disabled' not in page.text
    forged = browser.post(f"/api/v1/runs/{run['id']}/cancel")  # what another site could send
    assert forged.status_code == 401 and "X-Corral-Dashboard" in forged.json()["message"]
    ok = browser.post(f"/api/v1/runs/{run['id']}/cancel", headers={"X-Corral-Dashboard": "1"})
    assert ok.status_code == 200 and ok.json()["requested_action"] == "cancel"
    assert browser.get(f"/api/v1/runs/{run['id']}").status_code == 200  # reads need no header
    read_only = login(api, api.read_only_token)
    refused = read_only.post(f"/api/v1/runs/{run['id']}/stop", headers={"X-Corral-Dashboard": "1"})
    assert refused.status_code == 403


def test_a_preempted_attempt_and_its_recovery_show_on_the_timeline(
    api: Api, tmp_path: Path
) -> None:
    from corral.service.preempt import preempt_run
    from support.waiting import wait_until

    with api.client(api.token) as c:
        run = submit(c, 'name: spot\nrun: "sleep 60"\n', tmp_path)

        def shown() -> dict:
            return c.get(f"/api/v1/runs/{run['id']}").json()

        def started() -> bool:
            timeline = c.get(f"/api/v1/runs/{run['id']}/timeline").json()
            return any(a["stages"] for a in timeline["attempts"])

        wait_until(started, 60, 0.2, "the stage to have started")
        preempt_run(run["id"], grace=0.5)
        wait_until(
            lambda: shown()["attempt"] == 2 and shown()["state"] == "RUNNING",
            90,
            0.2,
            lambda: f"attempt 2 RUNNING, not {shown()['state']} (attempt {shown()['attempt']})",
        )
        timeline = c.get(f"/api/v1/runs/{run['id']}/timeline").json()
        first, second = timeline["attempts"]
        assert first["outcome"] == "preempted" and second["outcome"] is None
        assert [s["name"] for s in first["stages"]] == ["main"]
        assert "recovery" in [m["kind"] for m in timeline["marks"]]

        page = login(api, api.read_only_token).get(f"/ui/runs/{run['id']}").json()
        html = page["parts"]["timeline"]
        assert 'class="attempt preempted"' in html and "Attempt 2" in html
        assert 'class="mark recovery"' in html
        c.post(f"/api/v1/runs/{run['id']}/cancel")


JUDGED = """\
import json
from corral.sdk import report

for step in range(1, 31):  # a validation every 5th step, far more often than progress events
    report(step, total=30, loss=1.0 / step, **({"val_acc": step / 60} if step % 5 == 0 else {}))
with open("report.json", "w") as f:
    json.dump({"acc": 0.5}, f)
print("the newest line: accuracy 0.5 is short of 0.9", end="")
"""


def test_a_finished_run_shows_every_validation_point_its_verdict_and_why_it_ended(
    api: Api, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(JUDGED)
    spec = "name: judged\nrun: python train.py\neval:\n  report: report.json\n  acceptance: ['acc >= 0.9']\n"
    with api.client(api.token) as c:
        run = submit(c, spec, tmp_path)
        follow(c, run["id"])
        charts = c.get(f"/api/v1/runs/{run['id']}/charts").json()
        shown = c.get(f"/api/v1/runs/{run['id']}").json()
    assert {s["name"]: [p[0] for p in s["points"]] for s in charts["validation"]} == {
        "val_acc": [5, 10, 15, 20, 25, 30]
    }
    reader = login(api, api.read_only_token)
    table = reader.get("/").text
    row = table[table.index(f'data-run-id="{run["id"]}"') :].split("</tr>")[0]
    assert shown["state"] == "SUCCEEDED" and "SUCCEEDED" in row
    assert (
        '<span class="verdict rejected" title="acc = 0.5 (needs &gt;= 0.9)">rejected</span>' in row
    )
    assert f'class="muted small why" title="{shown["reason"]}"' in row
    logs = reader.get(f"/ui/runs/{run['id']}").json()["parts"]["logs"]
    assert (
        logs.split("</pre>")[0].rstrip().endswith("the newest line: accuracy 0.5 is short of 0.9")
    )


def test_a_live_attempt_shows_its_accrued_cost_in_its_row_and_the_cost_chart(
    api: Api, tmp_path: Path
) -> None:
    from corral.store import Store
    from support.waiting import wait_until

    with api.client(api.token) as c:
        run = submit(c, 'name: pricey\nrun: "sleep 60"\n', tmp_path)
        wait_until(lambda: c.get(f"/api/v1/runs/{run['id']}").json()["state"] == "RUNNING", 60)
        store = Store.open()
        try:  # a machine at $3600/h: a cent a second
            store.update_attempt(run["id"], 1, price_per_hour=3600.0)
        finally:
            store.close()
        charts = c.get(f"/api/v1/runs/{run['id']}/charts").json()
        reader = login(api, api.read_only_token)
        timeline = reader.get(f"/ui/runs/{run['id']}").json()["parts"]["timeline"]
        c.post(f"/api/v1/runs/{run['id']}/cancel")
    assert charts["cost"]["points"][-1][1] > 0.5
    assert "· $0.00" not in timeline and "running ·" in timeline


def test_a_multi_node_run_s_page_has_a_row_per_node(api: Api, tmp_path: Path) -> None:
    """The run page's node table: each node of the current attempt's gang, its machine,
    where, state and cost (the resource rows the controller keeps, one per node)."""
    from corral.store import Store

    with api.client(api.token) as c:
        run = submit(c, 'name: gang-page\nrun: "echo one"\n', tmp_path)
        follow(c, run["id"])
    store = Store.open()
    offer = {"provider": "fake", "offer_id": "x", "region": "r1", "price_per_hour": 2.0}
    for rank in (0, 1):
        key = f"{run['id']}-gang-k{rank}"
        store.record_intent(
            run_id=run["id"], attempt=1, provider="fake", key=key,
            data={"offer": offer, "rank": rank},
        )  # fmt: skip
        store.update_resource(key, state="active", instance_id=f"fake-node{rank}")
    page = login(api, api.read_only_token).get(f"/runs/{run['id']}")
    assert page.status_code == 200
    assert '<table class="nodes">' in page.text
    assert "fake-node0" in page.text and "fake-node1" in page.text and "fake/r1" in page.text
