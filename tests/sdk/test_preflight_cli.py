"""``corral preflight FILE`` on real job specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.sdk.preflight_checks import check_mlflow, check_model, check_writable


def write_spec(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "train.txt").write_text("text\n")
    spec = folder / "corral.yaml"
    spec.write_text(
        "name: pf\n"
        "run: python train.py\n"
        "env:\n  DATASET: data\n"
        "checkpoints:\n  dir: ckpts\n"
        "trackers:\n  - type: wandb\n    mode: offline\n" + extra
    )
    return spec


def test_a_good_spec_passes_with_exit_code_zero(tmp_path, cli):
    result = cli(write_spec(tmp_path / "job"))
    assert result.exit_code == 0, result.output
    assert "pre-flight passed" in result.output
    for name in ("workdir", "dataset", "output_dir", "checkpoint_dir", "tracker: wandb"):
        assert name in result.output
    assert not (tmp_path / "job" / "ckpts").exists()  # checked, and left as it was


def test_a_missing_model_fails_with_exit_code_two_and_the_table(tmp_path, cli):
    spec = write_spec(tmp_path / "job")
    (spec.parent / "models").mkdir()  # models/base is a path in the workdir, not a Hub id
    result = cli(spec, "--set", "env.MODEL_PATH=models/base")
    assert result.exit_code == 2
    assert "FAIL" in result.output and "pre-flight failed: model" in result.output


def test_json_output_lists_every_check(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")  # a cloud that rents a 1-GPU machine
    spec = write_spec(tmp_path / "job", "resources:\n  gpus: 1\n")
    result = cli(spec, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    gpu = [c for c in report["checks"] if c["name"] == "gpu"]
    assert gpu == [
        {
            "name": "gpu",
            "status": "skip",
            "detail": "not checked: 1 GPU(s) come with the rented machine",
        }
    ]


def test_gpus_are_checked_when_the_job_runs_on_this_machine(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L4:1")
    spec = write_spec(tmp_path / "job", "resources:\n  gpus: 2\n  providers: [local]\n")
    result = cli(spec, "--json")
    assert result.exit_code == 2
    (gpu,) = [c for c in json.loads(result.output)["checks"] if c["name"] == "gpu"]
    assert gpu["status"] == "fail" and "needs 2 GPU(s), 1 visible" in gpu["detail"]


def test_s3_checkpoint_storage_is_not_checked_here(tmp_path, cli):
    spec = write_spec(tmp_path / "job")
    result = cli(spec, "--json", "--set", "checkpoints.storage=s3://bucket/ck")
    assert result.exit_code == 0, result.output
    (storage,) = [c for c in json.loads(result.output)["checks"] if c["name"] == "storage"]
    assert storage["status"] == "skip" and "aws extra" in storage["detail"]


# ``corral preflight FILE`` as a user runs it: the job's own environment (the spec's ``env`` and
# ``secrets:``, the secret store) decides the credential checks, paths in the spec are under the
# workdir, and no detail shows a secret.


SECRET = "wandb-key-0123456789abcdef"


def spec_file(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "corral.yaml"
    path.write_text("name: pf\nrun: python train.py\n" + body)
    return path


def checks(result) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(result.output)["checks"]}


@pytest.fixture
def no_wandb_login(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


def test_a_wandb_key_in_the_secret_store_listed_under_secrets_passes(tmp_path, cli, no_wandb_login):
    from corral.secrets import SecretStore

    SecretStore().set("WANDB_API_KEY", SECRET)  # what the check's own message says to do
    spec = spec_file(tmp_path / "job", "secrets: [WANDB_API_KEY]\ntrackers:\n  - type: wandb\n")
    result = cli(spec, "--json")
    assert result.exit_code == 0, result.output
    assert checks(result)["tracker: wandb"]["status"] == "pass"
    assert SECRET not in result.output


def test_a_wandb_key_in_the_store_but_not_in_secrets_fails_saying_so(tmp_path, cli, no_wandb_login):
    from corral.secrets import SecretStore

    SecretStore().set("WANDB_API_KEY", SECRET)
    spec = spec_file(tmp_path / "job", "trackers:\n  - type: wandb\n")
    result = cli(spec, "--json")
    assert result.exit_code == 2, result.output
    wandb = checks(result)["tracker: wandb"]
    assert wandb["status"] == "fail" and "secrets:" in wandb["detail"]


def test_a_secret_the_spec_lists_but_nobody_set_fails_before_the_launch(tmp_path, cli, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    spec = spec_file(tmp_path / "job", "secrets: [HF_TOKEN]\n")
    result = cli(spec, "--json")
    assert result.exit_code == 2, result.output
    secrets = checks(result)["secrets"]
    assert secrets["status"] == "fail" and "HF_TOKEN" in secrets["detail"]


def test_wandb_offline_mode_from_the_specs_env_needs_no_key(tmp_path, cli, no_wandb_login):
    spec = spec_file(tmp_path / "job", "env:\n  WANDB_MODE: offline\ntrackers:\n  - type: wandb\n")
    result = cli(spec, "--json")
    assert result.exit_code == 0, result.output
    assert checks(result)["tracker: wandb"]["status"] == "pass"


def test_the_specs_mlflow_uri_is_checked_relative_to_the_workdir(tmp_path, cli, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job" / "mlruns").mkdir(parents=True)
    spec = spec_file(
        tmp_path / "job",
        "env:\n  MLFLOW_TRACKING_URI: sqlite:///mlruns/mlflow.db\ntrackers:\n  - type: mlflow\n",
    )
    result = cli(spec, "--json")
    assert result.exit_code == 0, result.output
    mlflow = checks(result)["tracker: mlflow"]
    assert mlflow["status"] == "pass"
    assert str(tmp_path / "job" / "mlruns" / "mlflow.db") in mlflow["detail"]


def test_hf_hub_offline_in_the_specs_env_makes_a_missing_hub_model_fail(tmp_path, cli, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    spec = spec_file(tmp_path / "job", "env:\n  HF_HUB_OFFLINE: 1\n  MODEL_PATH: org/name\n")
    result = cli(spec, "--json")
    assert result.exit_code == 2, result.output
    assert checks(result)["model"]["status"] == "fail"


def test_a_hub_model_id_in_the_specs_env_is_not_taken_for_a_workdir_path(
    tmp_path, cli, monkeypatch
):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    spec = spec_file(tmp_path / "job", "env:\n  MODEL_PATH: meta-llama/Llama-3.2-1B\n")
    result = cli(spec, "--json")
    assert result.exit_code == 0, result.output
    model = checks(result)["model"]
    assert model["status"] == "skip" and "Hub id" in model["detail"], model


def test_a_dataset_named_in_a_stages_env_is_checked(tmp_path, cli):
    spec = spec_file(
        tmp_path / "job",
        "stages:\n  - name: train\n    run: python t.py\n    env:\n      DATASET: data/x\n",
    )
    spec.write_text(spec.read_text().replace("run: python train.py\n", "", 1))
    result = cli(spec, "--json")
    assert result.exit_code == 2, result.output
    dataset = checks(result)["dataset (stage train)"]
    assert dataset["status"] == "fail" and "does not exist" in dataset["detail"]


def test_a_workdir_that_is_a_file_fails_as_not_a_directory(tmp_path, cli):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "afile").write_text("x")
    spec = spec_file(tmp_path / "job", "workdir: afile\n")
    result = cli(spec, "--json")
    assert result.exit_code == 2, result.output
    found = checks(result)
    assert found["workdir"]["status"] == "fail"
    assert "not a directory" in found["workdir"]["detail"]
    assert "not a directory" in found["output_dir"]["detail"]


def test_a_file_where_a_directory_should_be_is_named_as_such(tmp_path):
    (tmp_path / "afile").write_text("x")
    check = check_writable("checkpoint_dir", tmp_path / "afile", 0.0)
    assert check.status == "fail" and "is not a directory" in check.detail


@pytest.mark.parametrize(
    "uri", ["https://user:hunter22@host/models/x", "s3://AKIAEXAMPLE:hunter22@bucket/m"]
)
def test_a_remote_model_uri_is_not_checked_and_its_password_never_shown(uri):
    check = check_model(uri, {})
    assert check.status == "skip", check
    assert "hunter22" not in check.detail and "***" in check.detail


def test_a_malformed_sqlite_uri_hides_its_password():
    pytest.importorskip("mlflow")
    check = check_mlflow({"tracking_uri": "sqlite://user:hunter22@host/x.db"}, {})
    assert check.status == "fail" and "hunter22" not in check.detail


def test_a_secret_value_in_a_detail_is_masked_in_the_table_and_json(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-hunter22-secret")
    spec = spec_file(
        tmp_path / "job",
        "env:\n  DATASET: https://host/data?token=tok-hunter22-secret\n",
    )
    for args in ((), ("--json",)):
        result = cli(spec, *args)
        assert result.exit_code == 0, result.output
        assert "tok-hunter22-secret" not in result.output
