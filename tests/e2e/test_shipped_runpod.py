"""The quickstart on the fake RunPod, from shipped code only: each pod's "container" runs
under a root of its own and never sees the controller's workdir or home; the code and the
checkpoints travel through the run's storage; RunPod interrupts the first (spot) pod (see
tests/e2e/shipped.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.store import Store
from providers.runpod.fake_server import API_KEY, FakeRunPod

from .shipped import (
    check_finished_like_uninterrupted,
    copy_quickstart,
    reference_weights,
    run_preempted,
)

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_the_quickstart_ships_to_a_pod_is_interrupted_and_resumes_without_resending_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    fake = FakeRunPod(tmp_path / "pods")
    try:
        env = {
            **{f"CORRAL_RUNPOD_{k.upper()}": v for k, v in fake.settings().items()},
            "CORRAL_RUNPOD_RATE_PER_S": "none",
            "CORRAL_PROVIDERS": "runpod",
            "RUNPOD_API_KEY": API_KEY,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        expected = reference_weights(tmp_path_factory)

        def interrupt(run_id: str) -> None:
            pod_id = Store.open().attempts(run_id)[0].instance_id
            fake.interrupt(pod_id, notice=5.0)

        bucket = tmp_path / "bucket"
        run = run_preempted(
            copy_quickstart(tmp_path),
            f"file://{bucket}",
            interrupt,
            set_=["resources.gpus=L40S:1", "resources.spot=true"],
        )
        check_finished_like_uninterrupted(run, bucket, expected)
        assert fake.cloud.list() == []  # both pods gone
    finally:
        fake.close()
    fake.contract.assert_clean()  # every REST v2 exchange kept RunPod's published document
