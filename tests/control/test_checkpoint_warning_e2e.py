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


def test_a_checkpoint_never_copyable_shows_in_status_while_the_run_is_live(
    tmp_path: Path, corral_home: Path
) -> None:
    """The job holds its checkpoint open for writing all along (no version can be copied):
    ``corral status`` shows the warning while the run is RUNNING, not after it ended."""
    from control.helpers import start_controller, submit
    from support.waiting import wait_until

    bucket = tmp_path / "bucket"
    (tmp_path / "train.py").write_text(
        "import time\n"
        "with open('ckpt.pt', 'wb') as f:\n"
        "    while True:\n"
        "        f.write(b'x' * 1024)\n"
        "        f.flush()\n"
        "        time.sleep(0.1)\n"
    )
    spec = write_spec(
        tmp_path,
        f"""
        name: never-still
        run: python train.py
        resume_args: --resume
        checkpoints: {{path: ckpt.pt, settle: 1s, storage: "{bucket}"}}
        """,
    )
    run_id = submit(spec)
    proc = start_controller()
    try:

        def warned() -> bool:
            return bool(_status(run_id)[1].get("warnings"))

        wait_until(warned, 60, interval=0.5, message="the warning in corral status")
        text, data = _status(run_id)
        assert data["state"] == "RUNNING"
        [warning] = data["warnings"]
        assert "ckpt.pt" in warning and "could be copied" in warning
        assert "warning" in text and "could be copied" in " ".join(text.split())
        stopped = CliRunner().invoke(app, ["cancel", run_id])
        assert stopped.exit_code == 0, stopped.output
        wait_until(lambda: Store.open().get_run(run_id).state == "CANCELLED", 60, interval=0.5)
    finally:
        proc.terminate()
        proc.wait(10)
