from __future__ import annotations

import http.server
import io
import json
import socket
import threading
from pathlib import Path

import pytest
from rich.console import Console

from corral.errors import BadInput
from corral.sdk import preflight
from corral.sdk.preflight_checks import PreflightReport, safe_uri


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty HOME (no ~/.netrc login)."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def dataset(tmp_path) -> Path:
    path = tmp_path / "data" / "train.txt"
    path.parent.mkdir()
    path.write_text("hello\n")
    return path


def run(**kwargs) -> tuple[PreflightReport, str]:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    report = preflight(raise_on_fail=False, console=console, **kwargs)
    return report, out.getvalue()


def test_everything_in_place_passes_and_prints_a_table(tmp_path, dataset, monkeypatch, home):
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L4:2")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    report, table = run(
        dataset=dataset,
        output_dir=tmp_path / "out",
        checkpoint_dir=tmp_path / "ckpt",
        trackers=[{"type": "wandb", "mode": "offline"}, "jsonl"],
        model_path=model,
        need_gpu=2,
        environ={},
    )
    assert report.ok, report.to_dict()
    assert [c.name for c in report.checks] == [
        "dataset",
        "output_dir",
        "checkpoint_dir",
        "tracker: wandb",
        "tracker: jsonl",
        "model",
        "gpu",
    ]
    assert "pre-flight checks" in table and table.count("PASS") == 7
    assert "2 visible: L4, L4" in table
    assert not (tmp_path / "ckpt").exists()  # created for the check, removed after it


def test_failures_are_named_in_one_bad_input_error(tmp_path, home, monkeypatch):
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L4:0")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(BadInput) as err:
        preflight(
            dataset=tmp_path / "missing",
            output_dir=blocker / "sub",  # a path below a file cannot be created
            trackers=[{"type": "wandb"}],
            model_path=tmp_path / "no-model",
            need_gpu=True,
            show=False,
            environ={},
        )
    message = str(err.value)
    assert message.startswith("pre-flight failed: ")
    for name in ("dataset", "output_dir", "tracker: wandb", "model", "gpu"):
        assert f"{name}: " in message
    assert "needs 1 GPU(s), 0 visible" in message
    assert err.value.exit_code == 2
    assert err.value.fields["ok"] is False


def test_not_enough_free_disk_fails(tmp_path):
    report, _ = run(checkpoint_dir=tmp_path / "ckpt", min_free_gb=10**9)
    (check,) = report.checks
    assert check.status == "fail" and "GB free, needs 1e+09 GB" in check.detail


def test_s3_uris_are_reported_as_not_checked_rather_than_passed(tmp_path):
    report, table = run(dataset="s3://bucket/train", storage="s3://bucket/ckpts")
    assert report.ok
    assert [(c.name, c.status) for c in report.checks] == [("dataset", "skip"), ("storage", "skip")]
    assert all("not checked: needs the aws extra" in c.detail for c in report.checks)
    assert "SKIP" in table


def test_local_storage_uri_must_be_writable(tmp_path):
    report, _ = run(storage=(tmp_path / "store").as_uri())
    assert report.get("storage").status == "pass"


def test_an_empty_dataset_directory_is_a_warning(tmp_path):
    (tmp_path / "empty").mkdir()
    report, table = run(dataset=tmp_path / "empty")
    assert report.ok and report.get("dataset").status == "warn" and "WARN" in table


def test_wandb_credentials_from_env_or_netrc_and_never_shown(home):
    secret = "sekrit-0123456789abcdef"
    report, table = run(trackers=["wandb"], environ={"WANDB_API_KEY": secret})
    assert report.ok and secret not in table and secret not in json.dumps(report.to_dict())
    report, _ = run(trackers=["wandb"], environ={})
    assert not report.ok and "WANDB_API_KEY" in report.failed[0].detail
    (home / ".netrc").write_text(f"machine api.wandb.ai\n  login user\n  password {secret}\n")
    (home / ".netrc").chmod(0o600)
    report, table = run(trackers=["wandb"], environ={})
    assert report.ok and "~/.netrc" in table and secret not in table
    report, _ = run(trackers=["wandb"], environ={"WANDB_MODE": "offline"})
    assert report.ok


def test_mlflow_sqlite_store_is_checked(tmp_path):
    db = tmp_path / "mlflow.db"
    report, _ = run(trackers=[{"type": "mlflow", "tracking_uri": f"sqlite:///{db}"}])
    assert report.ok and "will be created" in report.checks[0].detail
    db.write_text("this is not a database")
    report, _ = run(trackers=[{"type": "mlflow", "tracking_uri": f"sqlite:///{db}"}])
    assert not report.ok and "not a usable sqlite database" in report.failed[0].detail
    report, _ = run(trackers=[{"type": "mlflow"}], environ={})
    assert report.checks[0].status == "warn"


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args):
        pass


def test_mlflow_server_must_answer_health(tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        uri = f"http://user:pw@127.0.0.1:{server.server_port}"
        report, table = run(trackers=[{"type": "mlflow", "tracking_uri": uri}])
        assert report.ok and ":pw@" not in table and "user:***@" in table
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    report, _ = run(
        trackers=[{"type": "mlflow", "tracking_uri": f"http://127.0.0.1:{closed_port}"}]
    )
    assert not report.ok and "unreachable" in report.failed[0].detail


def test_a_hub_model_id_is_not_checked_unless_offline(tmp_path):
    report, _ = run(model_path="meta-llama/Llama-3.2-1B", environ={})
    assert report.checks[0].status == "skip"
    report, _ = run(model_path="meta-llama/Llama-3.2-1B", environ={"HF_HUB_OFFLINE": "1"})
    assert report.checks[0].status == "fail"


def test_unknown_tracker_type_fails():
    report, _ = run(trackers=[{"type": "neptune"}])
    assert not report.ok and "unknown tracker type 'neptune'" in report.failed[0].detail


def test_safe_uri_hides_only_the_password():
    assert safe_uri("https://bob:hunter2@host:8080/p?q=1") == "https://bob:***@host:8080/p?q=1"
    assert safe_uri("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


def test_directories_created_for_the_check_are_removed_and_existing_ones_kept(tmp_path):
    tmp_path = tmp_path / "root"
    tmp_path.mkdir()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    empty = tmp_path / "empty"
    empty.mkdir()
    report, _ = run(
        output_dir=existing / "out" / "run-1",
        checkpoint_dir=empty,
        storage=(tmp_path / "store" / "ckpts").as_uri(),
        trackers=[{"type": "mlflow", "tracking_uri": f"sqlite:///{tmp_path}/ml/db/mlflow.db"}],
    )
    assert report.ok, report.checks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "existing"]
    assert sorted(p.name for p in existing.iterdir()) == ["keep.txt"]
    assert empty.is_dir() and not any(empty.iterdir())


def test_a_failed_check_also_removes_what_it_created(tmp_path):
    report, _ = run(checkpoint_dir=tmp_path / "a" / "b", min_free_gb=10**9)
    assert report.get("checkpoint_dir").status == "fail"
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("https://bob:hunter2@host:99999/p", "https://bob:***@host:99999/p"),
        ("https://bob:hunter2@host:port/p", "https://bob:***@host:port/p"),
        ("https://bob:hunter2@[::1", "https://bob:***@[::1"),
        ("http://bob:hunter2@host?x=a@b", "http://bob:***@host?x=a@b"),
        ("https://bob@host/p", "https://bob@host/p"),
    ],
)
def test_safe_uri_hides_the_password_of_a_malformed_uri_too(uri, shown):
    assert safe_uri(uri) == shown


@pytest.mark.parametrize(  # an address, not a name: no test looks one up (or reaches past loopback)
    "uri",
    ["http://bob:hunter2@127.0.0.1:99999", "http://bob:hunter2@[::1", "https://bob:hunter2@h:x"],
)
def test_a_malformed_mlflow_server_uri_fails_the_check_without_a_traceback(uri):
    report, table = run(trackers=[{"type": "mlflow", "tracking_uri": uri}])
    assert not report.ok
    assert "hunter2" not in table and "hunter2" not in report.failed[0].detail


@pytest.mark.parametrize("uri", ["file://", "", "  "])
def test_storage_without_a_path_fails_instead_of_checking_the_current_directory(uri):
    from corral.sdk.preflight_checks import check_storage

    check = check_storage(uri, 0.0, "checkpoints")
    assert check.status == "fail" and "no path given" in check.detail


@pytest.mark.parametrize("what", ["model", "dataset", "output", "sqlite"])
def test_a_path_that_cannot_be_looked_into_fails_its_check_not_the_run(tmp_path, what):
    """A permission error (a parent directory without search permission) is a failed check with
    the reason, not a traceback. Checked in a child process without root's privileges."""
    import os

    from corral.sdk import preflight_checks as pc

    locked = tmp_path / "locked"
    (locked / "inside").mkdir(parents=True)
    target = locked / "inside"
    run_check = {
        "model": lambda: pc.check_model(str(target), {}),
        "dataset": lambda: pc.check_readable("dataset", str(target)),
        "output": lambda: pc.check_writable("output_dir", str(target / "out"), 0.0),
        "sqlite": lambda: pc._check_sqlite("mlflow", target / "mlflow.db"),
    }[what]
    locked.chmod(0)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)  # nobody: permissions apply
            check = run_check()
            os.write(write_end, json.dumps([check.status, check.detail]).encode())
        except BaseException as exc:
            os.write(write_end, json.dumps(["raised", repr(exc)]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as f:
            status, detail = json.loads(f.read())
        os.waitpid(pid, 0)
    finally:
        locked.chmod(0o755)
    assert status == "fail", detail
    assert "ermission denied" in detail
