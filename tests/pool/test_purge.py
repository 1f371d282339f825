"""``corral pool purge QUEUE`` on a real Redis: the runs waiting in the queue are cancelled
(through the store, as `corral cancel` would), the ones a worker holds and other queues' are
left alone, an unknown queue is one line, and without --yes nothing happens unattended."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from corral.cli.app import app
from corral.queue.attempts import AttemptStore
from corral.queue.client import connect
from corral.queue.keys import Keys
from corral.service.pool_purge import purge, waiting_runs
from corral.store import Store
from support.pool import scratch_pool


def _run(store: Store, name: str) -> str:
    return store.create_run(
        name=name, spec={"name": name, "run": "true"}, spec_hash="h", spec_path="/x",
        workdir="/tmp",
    ).id  # fmt: skip


def test_purge_cancels_the_waiting_runs_only(corral_home: Path, monkeypatch) -> None:
    store = Store.open()
    with scratch_pool() as settings:
        client = connect(settings)
        attempts = AttemptStore(client, Keys(settings.name))
        queue = f"{settings.name}.l4x1"
        runs = {n: _run(store, n) for n in ("wait-a", "wait-b", "held", "other")}
        for name, run_id in runs.items():
            q = f"{settings.name}.a100x1" if name == "other" else queue
            attempts.create(
                f"{run_id}-a1", fields={"run_id": run_id, "queue": q}, bootstrap="{}", ttl_s=60
            )
        attempts.claim(f"{runs['held']}-a1", worker="w1", host="h", lost_after_s=30, delivery="d")
        assert waiting_runs(settings, queue) == (sorted([runs["wait-a"], runs["wait-b"]]), 1)

        monkeypatch.setenv("CORRAL_POOL_BROKER", settings.broker_url)
        monkeypatch.setenv("CORRAL_POOL_NAME", settings.name)
        # unattended without --yes: nothing is cancelled
        out = CliRunner().invoke(app, ["pool", "purge", queue])
        assert out.exit_code != 0 and "pass --yes" in out.output
        assert all(store.get_run(r).requested_action is None for r in runs.values())
        # an unknown queue: one line naming it and the known ones
        out = CliRunner().invoke(app, ["pool", "purge", "nope", "--yes"])
        assert out.exit_code != 0 and "queue 'nope'" in out.output and queue in out.output

        view = purge(replace(settings), queue, store=store)
        assert sorted(view.cancelled) == sorted([runs["wait-a"], runs["wait-b"]])
        assert view.running == 1
        assert {n: store.get_run(r).requested_action for n, r in runs.items()} == {
            "wait-a": "cancel",
            "wait-b": "cancel",
            "held": None,
            "other": None,
        }
        assert store.events(runs["wait-a"], types=["pool.purged"])
        out = CliRunner().invoke(app, ["pool", "purge", queue, "--yes", "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["running"] == 1
        client.close()
