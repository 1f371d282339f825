"""Spec ``secrets:`` reach the job's environment and nowhere else: not the run row, the events,
the copied stage logs or the controller's log."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from control.helpers import run_to_end, submit, write_spec
from corral.secrets import SecretStore
from corral.store import Store

STORED = "stored-value-Xq81pZ"
FROM_ENV = "env-value-Lm42kR"


def _dump(obj) -> str:
    return json.dumps(obj, default=str)


def test_spec_secrets_reach_the_stage_env_and_are_redacted_everywhere_else(
    tmp_path: Path, corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    SecretStore().set("MODEL_TOKEN", STORED)
    monkeypatch.setenv("DATASET_PASSPHRASE", FROM_ENV)  # inherited by the controller process
    spec = write_spec(
        tmp_path,
        """
        name: secretive
        secrets: [MODEL_TOKEN, DATASET_PASSPHRASE]
        run: >-
          printf '%s|%s' "$MODEL_TOKEN" "$DATASET_PASSPHRASE" > seen.txt &&
          echo "token=$MODEL_TOKEN pass=$DATASET_PASSPHRASE" &&
          echo "json={\\"k\\": \\"$MODEL_TOKEN\\"}"
    """,
    )
    run = run_to_end(spec)
    run_id, store = run.id, Store.open()
    assert run.state == "SUCCEEDED", run.reason
    # the job saw both values
    assert (tmp_path / "seen.txt").read_text() == f"{STORED}|{FROM_ENV}"
    # the copied log has the lines, with the values masked
    log = (corral_home / "runs" / run_id / "logs" / "a1" / "main.log").read_text()
    assert "token=*** pass=***" in log and 'json={"k": "***"}' in log
    # nothing the controller keeps holds a value
    kept = [
        _dump(store.get_run(run_id).to_dict()),
        _dump([a.to_dict() for a in store.attempts(run_id)]),
        _dump([e.to_dict() for e in store.events(run_id)]),
        _dump([r.to_dict() for r in store.resources(run_id=run_id)]),
        log,
        (corral_home / "controller-test.log").read_text(),
    ]
    for text in kept:
        assert STORED not in text and FROM_ENV not in text
    # nor any other file of the controller's home (the database included). Left out: the
    # stage's own log on the "machine" (the local provider's node directory), which holds what
    # the job printed, as a cloud machine's disk would
    node_logs = corral_home / "local" / "instances"
    for path in corral_home.rglob("*"):
        if path.is_file() and not (path.is_relative_to(node_logs) and "logs" in path.parts):
            data = path.read_bytes()
            assert STORED.encode() not in data and FROM_ENV.encode() not in data, path
    store.close()


def test_launch_with_a_missing_secret_fails_before_creating_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.cli.app import app

    monkeypatch.setenv("PRESENT_SECRET", "present-value")
    spec = write_spec(
        tmp_path, "name: needy\nsecrets: [PRESENT_SECRET, ABSENT_SECRET]\nrun: echo ok\n"
    )
    result = CliRunner().invoke(app, ["launch", str(spec), "--detach"])
    assert result.exit_code == 2
    assert "ABSENT_SECRET" in result.output and "PRESENT_SECRET" not in result.output
    assert "present-value" not in result.output
    assert Store.open().list_runs() == []


def test_controller_fails_a_run_whose_secret_is_missing_without_calling_the_provider(
    tmp_path: Path,
) -> None:
    from corral.control.context import Context
    from corral.control.controller import Controller
    from corral.providers.local.provider import LocalProvider

    class Counting(LocalProvider):
        calls: list[str] = []

        def launch(self, offer, bootstrap, key):  # type: ignore[override]
            self.calls.append(key)
            return super().launch(offer, bootstrap, key)

    spec = write_spec(tmp_path, "name: needy\nsecrets: [NEVER_SET_SECRET]\nrun: echo ok\n")
    run_id = submit(spec)  # as a CLI that skipped the check would have
    store = Store.open()
    provider = Counting(gpus=[])
    controller = Controller(Context(store=store, providers={"local": provider}))
    for _ in range(5):
        controller.tick()
    run = store.get_run(run_id)
    assert provider.calls == []
    assert run.state == "FAILED" and "NEVER_SET_SECRET" in run.reason
    assert store.resources(run_id=run_id, open_only=True) == []
    instances = provider.home / "local" / "instances"
    assert not instances.exists() or not any(instances.iterdir())


def test_copied_logs_are_redacted_by_a_controller_that_did_not_launch_the_run(
    tmp_path: Path, corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.control import sync
    from corral.control.context import Context

    monkeypatch.setenv("UNREMARKABLE_NAME", FROM_ENV)  # a name no pattern marks as secret
    spec = write_spec(tmp_path, "name: later\nsecrets: [UNREMARKABLE_NAME]\nrun: echo ok\n")
    run_id = submit(spec)
    lines = f"2026-01-01T00:00:00Z value {FROM_ENV}\n2026-01-01T00:00:01Z done\n"

    from corral.wire.poll import LogChunk, PollAnswer
    from corral.wire.status import AgentStatus

    size = len(lines.encode())

    class Agent:  # what the agent's /poll answers: whole lines, byte offsets
        def poll(self, events_after: int, offsets: dict, log_limit: int) -> PollAnswer:
            status = AgentStatus(run_id=run_id, attempt=1, phase="running")
            chunk = LogChunk(offset=0, next_offset=size, data=lines)
            return PollAnswer(status=status, logs={"main": chunk}, log_sizes={"main": size})

    ctx = Context(store=Store.open(), providers={})
    run = dataclasses.replace(ctx.store.get_run(run_id), attempt=1)  # as once launched
    sync.drain(ctx, run, Agent())  # type: ignore[arg-type]
    copied = (corral_home / "runs" / run_id / "logs" / "a1" / "main.log").read_text()
    assert copied == lines.replace(FROM_ENV, "***")
