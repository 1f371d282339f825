"""A job that prints, raises, reports (SDK ``report``/``progress``/``log``/``checkpoint``, the
secret as a value, a metric's name and a note) and logs its secrets: afterwards no secret
value is in any table of the store, any file under ``CORRAL_HOME``, any CLI output (``status
--json``, ``ls --json``, ``logs``, the service's events), any webhook payload, or any answer
of the agent's HTTP API. Prints the count of hits (must be 0)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from agent.helpers import TOKEN, Client, make_plan
from control.helpers import start_controller, submit, wait_for, write_spec
from corral.agent.main import Agent
from corral.notify.payloads import WEBHOOK_EVENTS
from corral.secrets import SecretStore
from corral.service.events import run_events
from corral.store import Store
from notify.hookreceiver import Receiver

pytestmark = pytest.mark.slow

STORED = "stored-value-Xq81pZ"  # in the secret store
FROM_ENV = "env-value-Lm42kR"  # in the environment, under a name no pattern marks as secret
HOOK_SECRET = "hook-signing-secret-4f1c"

JOB = """
import logging, os, sys
from corral.sdk.trackers import checkpoint, log, progress, report

s, e = os.environ["MODEL_TOKEN"], os.environ["PLAIN_NAME"]
print("printed", s, e, flush=True)
print("stderr", s, e, file=sys.stderr, flush=True)
logging.basicConfig(level=logging.INFO)
logging.getLogger("job").warning("logged %s %s", s, e)
report(1, total=3, loss=0.5, note=s, other=e)
report(2, total=3, **{s: 1.0, e: 2.0})
progress(3, total=3, note=e, nested={"k": s})
log({s: e, "note": s}, step=3)
checkpoint(3, "ckpt-" + s, {"note": e})
raise RuntimeError("boom " + s + " " + e)
"""


def _hits(texts: dict[str, str | bytes]) -> dict[str, int]:
    found = {}
    for where, value in texts.items():
        data = value.encode() if isinstance(value, str) else value
        n = sum(data.count(s.encode()) for s in (STORED, FROM_ENV))
        if n:
            found[where] = n
    return found


def _tables(home: Path) -> dict[str, str]:
    """Every row of every table of the store, as text."""
    engine = create_engine(f"sqlite:///{home / 'corral.db'}")
    out = {}
    with engine.connect() as conn:
        for table in inspect(engine).get_table_names():
            rows = conn.execute(text(f'SELECT * FROM "{table}"')).fetchall()
            out[f"table {table}"] = json.dumps([list(r) for r in rows], default=str)
    engine.dispose()
    return out


def test_a_job_leaking_its_secrets_every_way_leaves_no_value_anywhere(
    tmp_path: Path, corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.cli.app import app

    SecretStore().set("MODEL_TOKEN", STORED)
    monkeypatch.setenv("PLAIN_NAME", FROM_ENV)
    monkeypatch.setenv("HOOK_SECRET", HOOK_SECRET)
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    rx = Receiver(secret=HOOK_SECRET, tolerance=300)
    try:
        spec = write_spec(
            tmp_path,
            f"""
            name: leaky
            secrets: [MODEL_TOKEN, PLAIN_NAME]
            run: {sys.executable} job.py
            notify:
              webhooks:
                - url: {rx.url}
                  secret: HOOK_SECRET
                  progress_interval: 1s
            """,
        )
        run_id = submit(spec)
        store = Store.open()
        proc = start_controller()  # its dispatcher delivers the webhooks (HOOK_SECRET inherited)
        try:
            run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=90)
            assert run.state == "FAILED", run.reason
            wanted = [e.type for e in store.events(run_id) if e.type in WEBHOOK_EVENTS]
            rx.wait_for(len(wanted), timeout=15)
        finally:
            proc.terminate()
            proc.wait(10)
        events = [e.to_dict() for e in store.events(run.id)]
        assert any(e["type"] == "progress" for e in events)
        log = (corral_home / "runs" / run.id / "logs" / "a1" / "main.log").read_text()
        assert "printed *** ***" in log and "boom *** ***" in log  # copied, masked
        cli = CliRunner()
        outputs = {
            f"corral {' '.join(args)}": cli.invoke(app, args).output
            for args in (
                ["status", run.id, "--json"],
                ["ls", "--json"],
                ["logs", run.id],
                ["logs", run.id, "--timestamps"],
            )
        }
        json.loads(outputs[f"corral status {run.id} --json"])  # whole JSON documents
        json.loads(outputs["corral ls --json"])
        page = run_events(run.id, limit=1000, store=store)
        outputs["service run_events"] = json.dumps(page.to_json(), default=str)
        store.close()
        texts: dict[str, str | bytes] = {**_tables(corral_home), **outputs}
        # every file, the local provider's "machine" included (its disk: the stage log, the
        # agent's event file, the SDK's progress file, all written on the node)
        for path in corral_home.rglob("*"):
            if path.is_file():
                texts[f"file {path.relative_to(corral_home)}"] = path.read_bytes()
        for i, request in enumerate(rx.requests):
            texts[f"webhook {i} {request.type}"] = request.body
            texts[f"webhook {i} headers"] = json.dumps(request.headers)
        assert "progress" in rx.types() and "run.finished" in rx.types()
    finally:
        rx.close()
    hits = _hits(texts)
    print(f"secrets scan: {len(texts)} places, {sum(hits.values())} secret values found")
    assert hits == {}


def test_no_answer_of_the_agent_api_holds_a_secret_value_of_its_job(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    environ = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": ":".join(sys.path),
        "MODEL_TOKEN": STORED,
        "PLAIN_NAME": FROM_ENV,
        "CORRAL_SECRET_NAMES": "MODEL_TOKEN,PLAIN_NAME",
    }
    plan = make_plan(
        tmp_path,
        [{"name": "main", "run": f"cd {tmp_path} && {sys.executable} job.py"}],
        progress_event_interval=0.01,
    )
    agent = Agent(plan, TOKEN, environ=environ)
    client = Client(agent.start(), TOKEN, agent)
    try:
        final = client.wait_finished(timeout=30)
        assert final["phase"] == "failed"
        events = client.get("/events")["events"]
        assert any(e["type"] == "progress" for e in events)
        answers: dict[str, str | bytes] = {}
        for path in ("/status", "/events", "/logs", "/logs?stage=main", "/health", "/ready"):
            answers[path] = client.request("GET", path, raw=True)[1]
        # the job did report its secrets (masked, not dropped)
        assert "***" in answers["/status"] and "***" in answers["/events"]
        assert "printed *** ***" in answers["/logs?stage=main"]
    finally:
        agent.close(timeout=10)
    hits = _hits(answers)
    print(f"agent API scan: {len(answers)} answers, {sum(hits.values())} secret values found")
    assert hits == {}
