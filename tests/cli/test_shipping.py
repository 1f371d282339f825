"""``corral launch`` of a job for machines that do not share this one's files: a workdir over
``code.max_size`` is refused before anything is created or rented, naming its largest paths;
an unchanged workdir is not packed again; without object storage the controller sends the
bundle through the agent's port, once per machine; a run on this machine ships nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.providers.fake import ENV_FAKE_CLOUD
from corral.store import Store

runner = CliRunner()


@pytest.fixture
def fake_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({"launch_delay_s": 0.1}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")


def _job(tmp_path: Path, spec: str) -> Path:
    work = tmp_path / "job"
    work.mkdir(parents=True)
    (work / "corral.yaml").write_text(spec)
    return work


def test_a_workdir_over_the_limit_is_refused_before_anything_is_rented(
    tmp_path: Path, fake_cloud: None
) -> None:
    work = _job(tmp_path, "name: big\nrun: ls\ncode: {max_size: 1MB}\n")
    (work / "data").mkdir()
    (work / "data" / "shard.bin").write_bytes(os.urandom(1_500_000))
    (work / "weights.pt").write_bytes(b"0" * 300_000)
    result = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--detach"])
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert "over code.max_size" in err and "largest: data/ (1.5 MB), weights.pt (300.0 KB)" in err
    assert "Traceback" not in err
    assert Store.open().list_runs() == []
    home = Path(os.environ["CORRAL_HOME"])
    assert not (home / "fake" / "instances").exists() or not any(
        (home / "fake" / "instances").iterdir()
    )
    # ignored, it fits
    (work / ".corralignore").write_text("data/\n")
    ok = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["state"] == "SUCCEEDED"


def test_code_goes_through_the_agent_without_storage_and_is_packed_once(
    tmp_path: Path, fake_cloud: None
) -> None:
    work = _job(tmp_path, "name: shipped\nrun: cat hello.txt\n")
    (work / "hello.txt").write_text("hello from the shipped workdir\n")
    first = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    assert first.exit_code == 0, first.output
    assert "code: workdir, 2 files" in first.stderr and "not packed again" not in first.stderr
    run = json.loads(first.stdout)
    assert run["state"] == "SUCCEEDED", run["reason"]
    logs = runner.invoke(app, ["logs", run["id"]]).stdout
    assert "hello from the shipped workdir" in logs
    store = Store.open()
    [packed] = store.events(run["id"], types=["code.packed"])
    sent = store.events(run["id"], types=["code.sent"])
    assert [e.data["bytes"] for e in sent] == [packed.data["size"]]
    assert store.events(run["id"], types=["code.uploaded"]) == []
    status = json.loads(runner.invoke(app, ["status", run["id"], "--json"]).stdout)
    assert status["code"]["sha256"] == packed.data["sha256"]
    assert "code        workdir, 2 files" in runner.invoke(app, ["status", run["id"]]).stdout
    again = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    assert "unchanged: not packed again" in again.stderr
    [repacked] = store.events(json.loads(again.stdout)["id"], types=["code.packed"])
    assert repacked.data["sha256"] == packed.data["sha256"]


def test_a_run_on_this_machine_ships_nothing(tmp_path: Path) -> None:
    work = _job(tmp_path, "name: here\nrun: pwd\n")
    result = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert "code:" not in result.stderr
    assert Store.open().events(run["id"], types=["code.packed"]) == []
    assert str(work) in runner.invoke(app, ["logs", run["id"]]).stdout
    status = json.loads(runner.invoke(app, ["status", run["id"], "--json"]).stdout)
    assert "code" not in status


def test_files_are_put_where_the_spec_says_on_the_machine(tmp_path: Path, fake_cloud: None) -> None:
    secrets_dir = tmp_path / "dotfiles"
    secrets_dir.mkdir()
    (secrets_dir / "netrc").write_text("machine example.com login me\n")
    os.chmod(secrets_dir / "netrc", 0o600)
    (secrets_dir / "settings.toml").write_text("lr = 0.1\n")
    work = _job(
        tmp_path,
        # the machine's disk goes with it: the job shows what it found on it
        "name: with-files\n"
        "run: cat conf/settings.toml && cat $HOME/.netrc && stat -c mode=%a $HOME/.netrc\n"
        f"files:\n  /root/.netrc: {secrets_dir / 'netrc'}\n"
        f"  conf/settings.toml: {secrets_dir / 'settings.toml'}\n",
    )
    result = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["state"] == "SUCCEEDED", run["reason"]
    logs = runner.invoke(app, ["logs", run["id"]]).stdout
    assert "lr = 0.1" in logs  # conf/settings.toml, in the workdir
    # /root/.netrc: in the machine's home (its "/root"), private
    assert "| machine example.com login me\nmain | mode=600\n" in logs
    missing = _job(tmp_path / "m", "name: missing\nrun: ls\nfiles: {/etc/x: nowhere.txt}\n")
    refused = runner.invoke(app, ["launch", str(missing / "corral.yaml"), "--detach"])
    assert refused.exit_code == 2 and "nowhere.txt does not exist" in refused.stderr


def test_corrals_home_and_secret_files_never_travel_in_the_bundle(
    tmp_path: Path, fake_cloud: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec in $HOME with ``workdir: .`` and the default ``~/.corral``: the home (secret
    key, secret store, database) lies inside the workdir. None of it is packed, nor a stray
    copy of the secret files elsewhere in the workdir, and the launch says what it left out."""
    import tarfile

    work = _job(tmp_path, "name: homey\nrun: find . -type f | sort\n")
    home = work / ".corral"
    monkeypatch.setenv("CORRAL_HOME", str(home))
    monkeypatch.delenv("CORRAL_SECRET_KEY", raising=False)
    put = runner.invoke(app, ["secret", "set", "HF_TOKEN"], input="hf_sekrit_value_123\n")
    assert put.exit_code == 0, put.output
    assert (home / "secrets.json").exists() and (home / "secret.key").exists()
    (work / "backup").mkdir()
    (work / "backup" / "secrets.json").write_text((home / "secrets.json").read_text())
    (work / "backup" / "secret.key.old").write_bytes((home / "secret.key").read_bytes())
    (work / "train.py").write_text("print('hi')\n")
    result = runner.invoke(app, ["launch", str(work / "corral.yaml"), "--wait", "--json"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())  # the console wraps long lines
    assert "left out of the code bundle: .corral/, backup/secret.key.old, backup/secrets.json" in (
        said
    )
    run = json.loads(result.stdout)
    assert run["state"] == "SUCCEEDED", run["reason"]
    logs = runner.invoke(app, ["logs", run["id"]]).stdout
    assert "./train.py" in logs
    assert "secret" not in logs and ".corral" not in logs
    [packed] = Store.open().events(run["id"], types=["code.packed"])
    bundle = home / "code" / f"{packed.data['sha256']}.tar.gz"
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert names and not [n for n in names if ".corral" in n or "secret" in n]
