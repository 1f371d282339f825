"""`image:` on the fake cloud is honoured or refused, never ignored: its machines have this
machine's container engine, through which the agent runs the setup and the stages in the image
(a real podman, where this machine can run one), and without an engine the offers are refused
in one line (nothing runs on the machine's host python instead)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from control.helpers import submit, write_spec
from corral.errors import InfeasibleRequest
from corral.providers.base import Requirements
from corral.providers.fake import FakeProvider
from support import podman
from support.cannot_boot import run_until_it_ends

OFFER = {
    "id": "box",
    "region": "r1",
    "gpu_type": "L40S",
    "gpu_count": 1,
    "spot_price": 0.3,
    "on_demand_price": 0.9,
    "capacity": 2,
}


def _cloud(home: Path) -> FakeProvider:
    return FakeProvider({"offers": [OFFER], "launch_delay_s": 0.0}, home=home)


def test_without_an_engine_image_is_refused_in_one_line(
    corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither podman nor docker
    monkeypatch.delenv("CORRAL_CONTAINER_ENGINE", raising=False)
    provider = _cloud(corral_home)
    assert provider.offers(Requirements(spot=False))  # without image: as ever
    with pytest.raises(InfeasibleRequest) as exc:
        provider.offers(Requirements(spot=False, image="ghcr.io/me/train:1"))
    assert exc.value.message == (
        "fake: image 'ghcr.io/me/train:1' needs a container engine: neither podman nor docker "
        "is on PATH (install one, or set CORRAL_CONTAINER_ENGINE); corral does not run the job "
        "on the host"
    )
    assert provider.node_profile(provider.offers(Requirements())[0], "r").container_engine


def test_a_fake_machine_runs_the_jobs_commands_in_the_image(
    corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in podman.engine().items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.txt").write_text("shipped with the code\n")
    spec = write_spec(
        work,
        f"""
        name: imaged
        image: {podman.IMAGE}
        env: {{GREETING: hello-from-spec}}
        setup:
          - cat /etc/os-release > setup-saw.txt
        stages:
          - name: train
            run: >-
              cat /etc/os-release; cat data.txt; cat setup-saw.txt;
              echo "greeting=$GREETING pwd=$PWD"; test -e /usr/bin/python3 || echo no-python
        resources: {{gpus: "L40S:1", spot: false, providers: [fake]}}
        """,
    )
    run_id = submit(spec)
    run, _ = run_until_it_ends(run_id, "fake", _cloud(corral_home), timeout=120)
    assert run.state == "SUCCEEDED", run.reason
    logs = Path(os.environ["CORRAL_HOME"]) / "runs" / run_id / "logs"
    text = "".join(p.read_text() for p in logs.rglob("train*.log"))
    assert text.count(podman.MARKER) == 2  # the stage's own, and what the setup saw
    assert "shipped with the code" in text and "greeting=hello-from-spec pwd=/" in text
    assert "no-python" in text  # the image's tree, not the machine's
