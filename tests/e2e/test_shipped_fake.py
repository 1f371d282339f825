"""The quickstart on the fake spot cloud, from shipped code only: its machines run under roots
of their own and never see the controller's workdir or home (see tests/e2e/shipped.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.providers.fake import ENV_FAKE_CLOUD
from corral.service.preempt import preempt_run

from .shipped import (
    check_finished_like_uninterrupted,
    copy_quickstart,
    reference_weights,
    run_preempted,
)

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_the_quickstart_ships_is_preempted_and_resumes_without_resending_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    cloud = tmp_path / "cloud.json"
    cloud.write_text(
        json.dumps(
            {
                "launch_delay_s": 0.2,
                # each machine its own empty disk: the second one resumes from the storage
                "ephemeral_disk": True,
                "offers": [
                    {
                        "id": "cpu",
                        "region": "r1",
                        "gpu_count": 0,
                        "spot_price": 0.1,
                        "on_demand_price": 0.3,
                        "capacity": 2,
                    },
                ],
            }
        )
    )
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    expected = reference_weights(tmp_path_factory)
    bucket = tmp_path / "bucket"
    run = run_preempted(
        copy_quickstart(tmp_path),
        f"file://{bucket}",
        lambda run_id: preempt_run(run_id, grace=20),
    )
    check_finished_like_uninterrupted(run, bucket, expected)
