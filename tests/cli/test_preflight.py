"""`corral preflight` judges whether a launch could go ahead the way `corral launch` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.errors import EXIT_BAD_INPUT, EXIT_PROVIDER

PIPELINE = str(Path(__file__).resolve().parents[2] / "examples" / "pipeline" / "corral.yaml")


def _launch_check(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["preflight", *args, "--json"])
    (check,) = [c for c in json.loads(result.stdout)["checks"] if c["name"] == "launch"]
    return result.exit_code, check


@pytest.mark.parametrize("fake_gpus", [None, "L40S:2"], ids=["no-gpus", "too-few-fake-gpus"])
def test_the_pipeline_on_a_machine_without_its_gpus_fails_as_launch_refuses_it(
    monkeypatch: pytest.MonkeyPatch, fake_gpus: str | None
) -> None:
    monkeypatch.setenv("CORRAL_PROVIDERS", "local")
    if fake_gpus:
        monkeypatch.setenv("CORRAL_FAKE_GPUS", fake_gpus)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides every GPU this machine has
    code, check = _launch_check(PIPELINE)
    assert code == EXIT_BAD_INPUT and check["status"] == "fail"
    launched = CliRunner().invoke(app, ["launch", PIPELINE, "--detach"])
    assert launched.exit_code == EXIT_PROVIDER
    assert check["detail"] in launched.stderr.replace("\n", " ")


def test_the_pipeline_on_the_fake_cloud_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    code, check = _launch_check(PIPELINE)
    assert code == 0 and check["status"] == "pass" and "use-l40s-8" in check["detail"]
