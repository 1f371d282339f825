"""With ``checkpoints.storage`` set, a run whose checkpoint path holds nothing corral recognises
says so (a ``checkpoint.warning`` event, a line in ``corral status``) instead of succeeding in
silence with nothing a new machine could resume from."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from control.helpers import run_to_end, write_spec
from corral.cli.app import app
from corral.store import Store


def _status(run_id: str) -> tuple[str, dict]:
    runner = CliRunner()
    text = runner.invoke(app, ["status", run_id])
    data = runner.invoke(app, ["status", run_id, "--json"])
    assert text.exit_code == 0 and data.exit_code == 0, text.output
    return text.stdout, json.loads(data.stdout)


def test_storage_set_and_nothing_recognised_warns_in_events_and_status(
    tmp_path: Path, corral_home: Path
) -> None:
    bucket = tmp_path / "bucket"
    # checkpoints.path names ckpt.pt; the script saves model.pt
    spec = write_spec(
        tmp_path,
        f"""
        name: misnamed
        run: echo weights > model.pt
        checkpoints: {{path: ckpt.pt, storage: "{bucket}"}}
        """,
    )
    run = run_to_end(spec)
    assert run.state == "SUCCEEDED", run.reason
    [event] = Store.open().events(run.id, types=["checkpoint.warning"])
    assert "ckpt.pt" in event.data["message"]
    text, data = _status(run.id)
    assert data["warnings"] == [event.data["message"]]
    assert "warning" in text and "matched no checkpoint" in " ".join(text.split())

    # no checkpoints.path and no checkpoint of the SDK's (nanoGPT's ckpt.pt in its own dir)
    spec = write_spec(
        tmp_path,
        f"""
        name: unseen
        run: mkdir -p out && echo weights > out/ckpt.pt
        checkpoints: {{storage: "{bucket}"}}
        """,
        name="unseen.yaml",
    )
    run = run_to_end(spec)
    assert run.state == "SUCCEEDED", run.reason
    text, data = _status(run.id)
    [warning] = data["warnings"]
    assert "checkpoints.path" in warning and "warning" in text

    # a run that mirrors what it saves has no warning
    spec = write_spec(
        tmp_path,
        f"""
        name: fine
        run: mkdir -p out && echo weights > out/tmp && mv out/tmp out/ckpt.pt
        checkpoints: {{path: out/ckpt.pt, storage: "{bucket}"}}
        """,
        name="fine.yaml",
    )
    run = run_to_end(spec)
    assert run.state == "SUCCEEDED", run.reason
    text, data = _status(run.id)
    assert "warnings" not in data
    assert data["checkpoint_mirror"]["last_uploaded"] == "out/ckpt.pt"
    assert "mirrored    out/ckpt.pt (1 copy)" in text
    assert Store.open().events(run.id, types=["checkpoint.uploaded"])
