"""``corral preflight FILE`` on real job specs."""

from __future__ import annotations

import json
from pathlib import Path


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


def test_json_output_lists_every_check(tmp_path, cli):
    spec = write_spec(tmp_path / "job", "resources:\n  gpus: 2\n")
    result = cli(spec, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    gpu = [c for c in report["checks"] if c["name"] == "gpu"]
    assert gpu == [
        {
            "name": "gpu",
            "status": "skip",
            "detail": "not checked: 2 GPU(s) come with the rented machine",
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
