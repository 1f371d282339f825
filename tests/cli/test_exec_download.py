"""``corral exec`` and ``corral download`` end to end on a real local run: a command on the
run's machine with its output and exit code, the results fetched from the run's storage once
it is over and from its agent while it serves them, every file checked against the manifest,
and every use audited in the run's events without a secret value."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.agent.main import Agent
from corral.cli.app import app
from corral.control.tokens import agent_token
from corral.errors import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_NOT_FOUND
from corral.service.download import download_artifacts
from corral.store import Store
from corral.wire.plan import AgentPlan
from support.waiting import wait_until

from .helpers import wait_state

SECRET = "exec-secret-value-4f9c2e71"
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def launch(tmp_path: Path, body: str) -> str:
    path = tmp_path / "corral.yaml"
    path.write_text(textwrap.dedent(body).lstrip())
    code, out, err = cli("launch", str(path), "--detach", "--json")
    assert code == 0, err
    return json.loads(out)["id"]


def audit_events(run_id: str) -> list:
    with Store.open() as store:
        return [
            e for e in store.events(run_id) if e.type.startswith(("exec.", "artifacts.downloaded"))
        ]


@pytest.mark.slow
def test_exec_on_a_running_run_then_download_its_results_from_storage(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SECRET", SECRET)
    store_dir = tmp_path / "bucket"
    run_id = launch(
        tmp_path,
        f"""
        name: way-in
        env: {{GREETING: hello}}
        secrets: [MY_SECRET]
        artifacts: {{paths: ["out/**"], storage: {store_dir}}}
        run: mkdir -p out/sub && echo one > out/a.txt && echo two > out/sub/b.txt && sleep 60
        """,
    )
    wait_state(run_id, {"RUNNING"})
    wait_until(lambda: (tmp_path / "out" / "sub" / "b.txt").exists(), 30, 0.1, "the job")

    code, out, err = cli(
        "exec", run_id, "--", "sh", "-c", 'cat out/a.txt; echo "$GREETING $MY_SECRET"; exit 3'
    )
    assert code == 3, err  # the command's exit code
    assert out == "one\nhello ***\n"
    code, out, err = cli("exec", run_id, "--json", "--", "echo", SECRET)
    assert code == 0 and json.loads(out)["output"] == "***\n"
    assert json.loads(out)["command"] == "echo ***"
    code, _, err = cli("exec", run_id)
    assert code == EXIT_BAD_INPUT and "give the command to run after `--`" in err
    code, _, err = cli("download", run_id)  # running: nothing packaged, storage still empty
    assert code == EXIT_NOT_FOUND and "has no manifest in storage yet" in err

    code, out, err = cli("stop", run_id, "--wait", "--json")
    assert code == 0 and json.loads(out)["state"] == "STOPPED", err
    code, _, err = cli("exec", run_id, "--", "true")
    assert code == EXIT_CONFLICT and "STOPPED: its machine is gone" in err

    dest = tmp_path / "dl"
    code, out, err = cli("download", run_id, "-o", str(dest), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["source"] == "storage" and got["archive"] == str(dest / f"{run_id}-results.tar.gz")
    with tarfile.open(got["archive"]) as tar:
        names = sorted(tar.getnames())
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert names == ["artifacts/out/a.txt", "artifacts/out/sub/b.txt", "manifest.json"]
    assert manifest["run_id"] == run_id
    code, out, err = cli("download", run_id, "out/sub", "-o", str(dest))
    assert code == 0, err
    assert (dest / "out" / "sub" / "b.txt").read_text() == "two\n"
    assert not (dest / "out" / "a.txt").exists()
    (dest / "out" / "sub" / "b.txt").write_text("changed\n")
    code, _, err = cli("download", run_id, "out/sub/b.txt", "-o", str(dest))
    assert code == EXIT_BAD_INPUT and "exists with other contents (--force" in err
    code, _, err = cli("download", run_id, "out/sub/b.txt", "-o", str(dest), "--force")
    assert code == 0 and (dest / "out" / "sub" / "b.txt").read_text() == "two\n"
    code, _, err = cli("download", run_id, "nope.txt", "-o", str(dest))
    assert code == EXIT_NOT_FOUND and "has no artifact 'nope.txt'" in err

    events = audit_events(run_id)
    types = [e.type for e in events]
    assert types[:4] == ["exec.started", "exec.finished", "exec.started", "exec.finished"]
    first_done = events[1]
    assert first_done.data["exit_code"] == 3 and first_done.data["actor"]
    assert first_done.data["command"].startswith("sh -c ")
    assert types.count("artifacts.downloaded") == 3
    for e in events:
        assert SECRET not in e.reason and SECRET not in json.dumps(e.data)


def test_download_from_a_live_agent_checks_the_archive_against_its_manifest(tmp_path, corral_home):
    from control.helpers import submit, write_spec

    spec = write_spec(tmp_path, "name: live\nrun: echo\n")
    run_id = submit(spec)
    work = tmp_path / "work"
    work.mkdir()
    plan = AgentPlan.model_validate(
        {
            "run_id": run_id,
            "attempt": 1,
            "workdir": str(work),
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "state_dir": str(tmp_path / "state"),
            "devices": [],
            "grace_seconds": 0.5,
            "stages": [{"name": "main", "run": "mkdir -p out && echo weights > out/m.bin"}],
            "artifacts": {"paths": ["out/*"]},
        }
    )
    agent = Agent(plan, agent_token(run_id, 1))
    url = agent.start()
    try:
        with Store.open() as store:
            store.transition(run_id, "RUNNING", "test", expect={"PENDING"}, attempt=1)
            store.create_attempt(run_id, 1, provider="local", offer={}, price_per_hour=0.0)
            store.update_attempt(run_id, 1, endpoint=url, state="RUNNING")
        agent.wait(20)
        wait_until(lambda: (tmp_path / "state" / "results.tar.gz").exists(), 20, 0.05, "package")
        dest = tmp_path / "dl"
        code, out, err = cli("download", run_id, "-o", str(dest), "--json")
        assert code == 0, err
        got = json.loads(out)
        assert got["source"] == "agent" and [f["path"] for f in got["files"]] == ["out/m.bin"]
        archive = Path(got["archive"])
        assert archive.read_bytes() == (tmp_path / "state" / "results.tar.gz").read_bytes()
        code, out, err = cli("download", run_id, "out/m.bin", "-o", str(dest))
        assert code == 0 and (dest / "out" / "m.bin").read_text() == "weights\n"
        seen: list[tuple[int, int | None]] = []
        done = download_artifacts(
            run_id, dest=tmp_path / "dl3", on_progress=lambda n, total: seen.append((n, total))
        )
        size = archive.stat().st_size
        assert (size, size) in seen  # the archive's bytes, with its length known
        assert seen[-1] == (len("weights\n"), len("weights\n"))  # then the file checked
        assert done.source == "agent"
        # a tampered archive is refused, and nothing is written
        with tarfile.open(tmp_path / "state" / "results.tar.gz") as tar:
            manifest = tar.extractfile("manifest.json").read()
        bad = tmp_path / "state" / "results.tar.gz"
        with tarfile.open(bad, "w:gz") as tar:
            for name, data in (("manifest.json", manifest), ("artifacts/out/m.bin", b"evil\n")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        code, _, err = cli("download", run_id, "out/m.bin", "-o", str(tmp_path / "dl2"))
        assert code == EXIT_BAD_INPUT and "does not match its manifest" in err
        assert not (tmp_path / "dl2" / "out" / "m.bin").exists()
    finally:
        agent.close(10)
