"""`image:` on AWS: the instance's agent runs the job in the image through the AMI's docker.

No docker engine runs here, so the EC2 stand-in's machine (the real user-data: the node
bootstrap, then the boot module, then the agent) finds a recording ``docker`` on its PATH
(``support/fake_engine.py``) that logs each call and runs the command on this host. What was
not run: a real ``docker run --gpus`` on a Deep Learning AMI (no GPU, no docker daemon here);
the same code path runs podman for real in ``tests/cli/test_image_local.py``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import uuid
from pathlib import Path

import httpx

from corral.errors import NotYetTerminated
from corral.providers.aws.userdata import extract_payload
from corral.providers.base import Bootstrap, ImageRef, InstanceState
from support import fake_engine
from support.waiting import wait_until

from ..contract import new_key, provider_plan
from .test_provider import pick, wait_status

IMAGE = "ghcr.io/acme/train:1"


def test_an_aws_job_with_image_runs_in_it_through_docker_with_its_gpus_and_registry_login(
    make_provider, aws, runner, tmp_path, monkeypatch, request
) -> None:
    # a directory of its own on the machine's PATH, where the AMI has its docker
    engine_dir = Path("/tmp") / f"corral-fake-docker-{uuid.uuid4().hex[:8]}"
    request.addfinalizer(lambda: shutil.rmtree(engine_dir, ignore_errors=True))
    fake_engine.install(engine_dir, "docker")
    monkeypatch.setenv("PATH", f"{engine_dir}:{os.environ['PATH']}")
    (tmp_path / "marker.txt").write_text("shipped code\n")
    p = make_provider()
    offer = pick(p, spot=False)
    key = new_key()
    run = 'cat marker.txt; echo "gpus=$CUDA_VISIBLE_DEVICES"; test -n "$HF_TOKEN" && echo token-set'
    plan = provider_plan(p, offer, tmp_path, key, run, image=IMAGE)
    assert plan.container is not None and plan.container.engine == "docker"
    boot = Bootstrap(
        plan=plan,
        token="tok-" + uuid.uuid4().hex,
        env={"HF_TOKEN": "hf-secret-value", "CORRAL_SECRET_NAMES": "HF_TOKEN"},  # as launching does
        image=ImageRef(name=IMAGE, username="bot", password="reg-pass-123"),
    )
    inst = p.launch(offer, boot, key)
    raw = aws.client().describe_instance_attribute(
        InstanceId=inst.instance_id, Attribute="userData"
    )
    payload = extract_payload(base64.b64decode(raw["UserData"]["Value"]).decode())
    assert "reg-pass-123" not in payload.plan.model_dump_json()  # never in the plan
    assert payload.env["CORRAL_IMAGE_USERNAME"] == "bot"
    st = wait_status(p, inst, {InstanceState.RUNNING})
    agent = httpx.Client(base_url=st.endpoint, headers={"Authorization": f"Bearer {boot.token}"})
    wait_until(
        lambda: agent.get("/status").json()["phase"] in ("succeeded", "failed"),
        60,
        0.2,
        "the job to end",
    )
    status = agent.get("/status").json()
    fs = runner.root / inst.instance_id / "fs"
    assert status["phase"] == "succeeded", [p.read_text() for p in fs.glob("**/logs/*.log")]
    calls = fake_engine.calls(engine_dir)
    verbs = [c["argv"][0] for c in calls]
    assert verbs[:4] == ["image", "login", "pull", "run"], verbs
    login = calls[1]
    assert login["argv"] == ["login", "--username", "bot", "--password-stdin", "ghcr.io"]
    assert login["stdin"] == "reg-pass-123"  # on stdin, never on a command line
    assert calls[2]["argv"] == ["pull", IMAGE]
    argv = calls[3]["argv"]
    assert argv[:5] == ["run", "--rm", "--init", "--network", "host"]
    gpus = argv[argv.index("--gpus") + 1]
    assert gpus.startswith('"device=') and len(gpus.split(",")) == offer.gpu_count
    assert argv[argv.index(IMAGE) + 1 : argv.index(IMAGE) + 3] == ["bash", "-c"]
    passed = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert "HF_TOKEN" in passed and "CUDA_VISIBLE_DEVICES=0" in passed
    for call in calls:
        text = " ".join(call["argv"])
        assert "reg-pass-123" not in text and "hf-secret-value" not in text
    fs = runner.root / inst.instance_id / "fs"
    [log] = list(fs.glob("**/logs/main.log"))
    text = log.read_text()
    assert "shipped code" in text and "gpus=0" in text and "token-set" in text
    assert "hf-secret-value" not in text and "reg-pass-123" not in text
    with contextlib.suppress(NotYetTerminated):  # asked; EC2 finishes it
        p.terminate(inst)
