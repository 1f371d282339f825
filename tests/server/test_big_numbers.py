"""Integers as large as a client can write, on every front door: never a 5xx, never an
"internal error" exit. The API bounds its offsets and cursors in the schema (a 422 naming the
field beyond the store's largest integer); the largest one accepted reads an empty page or the
end of a log; the store takes any count; the CLI's ``ls --limit`` and ``download -o`` say what
is wrong in one line (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from corral.cli.app import app
from corral.store import Store
from server.conftest import Api
from server.test_api import follow, submit

HUGE = 2**64
BIGGEST = 2**63 - 1


def test_offsets_and_cursors_past_the_stores_integers_are_422_never_500(
    api: Api, tmp_path: Path
) -> None:
    with api.client(api.token) as c:
        run = submit(c, 'name: big\nrun: "echo hi"\n', tmp_path)
        follow(c, run["id"])
        rid = run["id"]
        for path, param in (
            ("/api/v1/runs", "offset"),
            (f"/api/v1/runs/{rid}/events", "after"),
            (f"/api/v1/runs/{rid}/logs?stage=main", "offset"),
            ("/ui/runs", "offset"),
            ("/", "offset"),
        ):
            res = c.get(path, params={param: HUGE})
            assert res.status_code in (401, 422), (path, res.status_code, res.text[:200])
            if res.status_code == 422:
                assert param in res.text
        assert c.get("/api/v1/runs", params={"offset": BIGGEST}).json()["runs"] == []
        page = c.get(f"/api/v1/runs/{rid}/events", params={"after": BIGGEST})
        assert page.status_code == 200 and page.json()["events"] == []
        chunk = c.get(f"/api/v1/runs/{rid}/logs", params={"stage": "main", "offset": BIGGEST})
        assert chunk.status_code == 200 and chunk.json()["text"] == "" and chunk.json()["eof"]
        doc = c.get("/openapi.json").json()
        offset = next(
            p for p in doc["paths"]["/api/v1/runs"]["get"]["parameters"] if p["name"] == "offset"
        )
        assert offset["schema"]["maximum"] == BIGGEST


def test_the_store_takes_any_count_and_cursor(corral_home: Path) -> None:
    store = Store.open()
    run = store.create_run(name="n", spec={}, spec_hash="h", spec_path="s", workdir="/")
    assert [r.id for r in store.list_runs(limit=HUGE)] == [run.id]
    assert store.events(run.id, after_id=HUGE) == []
    assert store.events(run.id, limit=HUGE)


def test_the_cli_says_what_is_wrong_in_one_line(corral_home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["ls", "--limit", str(HUGE), "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []
    work = tmp_path / "job"
    work.mkdir()
    (work / "corral.yaml").write_text("name: dl\nrun: echo hi\n")
    done = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    assert done.exit_code == 0, done.output
    target = tmp_path / "already-a-file"
    target.write_text("keep me\n")
    got = runner.invoke(app, ["download", json.loads(done.stdout)["id"], "-o", str(target)])
    assert got.exit_code == 2, got.output
    assert "not a directory" in got.stderr and "internal error" not in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1
    assert target.read_text() == "keep me\n"
