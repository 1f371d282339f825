"""``checkpoints.path`` set and nothing that resumes from what corral restores: ``corral
validate``, ``corral preflight`` and ``corral launch`` warn (the issue's run that restored
its checkpoint and started again at step 0, with every check passing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.spec.advice import spec_warnings

from .helpers import load

NO_RESUME = "name: t\nrun: python train.py --out_dir=out\ncheckpoints: {path: out/ckpt.pt}\n"


def test_a_checkpoint_path_without_any_resume_is_a_warning_naming_the_field(tmp_path) -> None:
    [warning] = spec_warnings(load(NO_RESUME, base_dir=tmp_path))
    assert warning.startswith("resume_args: ") and "CORRAL_RESUME_FROM" in warning
    assert "step 0" in warning
    stages = "name: t\nstages: [{name: a, run: x}, {name: b, run: y}]\ncheckpoints: {path: c}\n"
    [warning] = spec_warnings(load(stages, base_dir=tmp_path))
    assert warning.startswith("stages[].resume_args: ")


@pytest.mark.parametrize(
    "text",
    [
        NO_RESUME.replace("checkpoints", "resume_args: --init_from=resume\ncheckpoints"),
        NO_RESUME.replace("--out_dir=out", '--resume "$CORRAL_RESUME_FROM"'),
        "name: t\nrun: 'test -n \"$CORRAL_RESUME\" && echo r; python x.py'\n"
        "checkpoints: {path: c}\n",
        "name: t\nstages: [{name: prep, run: x}, {name: train, run: y, resume_args: --r}]\n"
        "checkpoints: {path: c}\n",
        "name: t\nrun: python train.py\n",  # no checkpoints.path: nothing to resume from
    ],
    ids=["resume_args", "command", "env-test", "one-stage-of-two", "no-path"],
)
def test_resuming_in_any_way_is_no_warning(text: str, tmp_path) -> None:
    assert spec_warnings(load(text, base_dir=tmp_path)) == []


def test_a_script_in_the_workdir_that_reads_the_variable_is_no_warning(tmp_path) -> None:
    (tmp_path / "train.py").write_text("import os\nsrc = os.environ.get('CORRAL_RESUME_FROM')\n")
    assert spec_warnings(load(NO_RESUME, base_dir=tmp_path)) == []
    (tmp_path / "train.py").write_text("print('starts at 0 whatever corral restored')\n")
    assert len(spec_warnings(load(NO_RESUME, base_dir=tmp_path))) == 1


def test_validate_and_preflight_warn_and_pass(tmp_path, corral_home, monkeypatch) -> None:
    from corral.cli.app import app

    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    spec = tmp_path / "corral.yaml"
    spec.write_text(NO_RESUME)
    shown = CliRunner().invoke(app, ["validate", str(spec)])
    assert shown.exit_code == 0, shown.output
    [line] = [ln for ln in shown.stderr.splitlines() if "warning" in ln]
    assert line.startswith(f"{spec}: warning: resume_args: checkpoints.path is set")
    checked = CliRunner().invoke(app, ["preflight", str(spec), "--json"])
    report = json.loads(checked.stdout)
    [resume] = [c for c in report["checks"] if c["name"] == "resume"]
    assert resume["status"] == "warn" and "CORRAL_RESUME_FROM" in resume["detail"]
    assert checked.exit_code == 0  # a warning: the pre-flight passes

    spec.write_text(
        NO_RESUME.replace("checkpoints", "resume_args: --init_from=resume\ncheckpoints")
    )
    shown = CliRunner().invoke(app, ["validate", str(spec)])
    assert shown.exit_code == 0 and "warning" not in shown.stderr


def test_launch_says_it_before_the_run_goes(tmp_path: Path, corral_home, monkeypatch) -> None:
    from corral.service.submit import submit_run

    monkeypatch.setenv("CORRAL_PROVIDERS", "local")
    spec = tmp_path / "corral.yaml"
    spec.write_text(NO_RESUME.replace("python train.py --out_dir=out", "'true'"))
    submitted = submit_run(spec, start_controller=False)
    [notice] = [n for n in submitted.notices if n.startswith("warning: ")]
    assert "resume_args: checkpoints.path is set" in notice
