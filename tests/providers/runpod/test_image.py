"""The spec's ``image`` on RunPod: the pods run it, with the private registry's credentials
stored once with RunPod (``POST /v2/registries``, named in the pod's ``registry``); the password, from corral's secret
store, is in no log, event, store row, file, pod environment or API answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.secrets.store import SecretStore
from corral.service.actions import wait_for_end
from corral.service.submit import submit_run
from corral.store import Store

from .fake_server import API_KEY

PASSWORD = "ghcr_pat_Pr1vateRegistryPassw0rd_9f3a"


@pytest.mark.slow
def test_a_private_image_runs_and_its_credentials_never_show(
    fake, tmp_path: Path, corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        **{f"CORRAL_RUNPOD_{k.upper()}": v for k, v in fake.settings().items()},
        "CORRAL_RUNPOD_RATE_PER_S": "none",
        "CORRAL_PROVIDERS": "runpod",
        "RUNPOD_API_KEY": API_KEY,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    SecretStore().set("REGISTRY_TOKEN", PASSWORD)
    work = tmp_path / "job"
    work.mkdir()
    (work / "corral.yaml").write_text(
        """
name: private-image
run: echo "running in the image"
resources: {gpus: "L40S:1", spot: false}
image: ghcr.io/acme/trainer:1.4.0
image_auth: {username: acme-bot, password_secret: REGISTRY_TOKEN}
"""
    )
    run = wait_for_end(submit_run(work / "corral.yaml").run.id, timeout_s=120)
    assert run.state == "SUCCEEDED", run.reason
    [body] = fake.creates
    [auth] = fake.cloud.registry_auths.values()
    assert body["image"] == "ghcr.io/acme/trainer:1.4.0"
    assert body["registry"] == auth["id"]
    assert (auth["username"], auth["password"]) == ("acme-bot", PASSWORD)  # where it must go
    # the password reached RunPod once, in the credentials' own request; nowhere else
    assert PASSWORD not in json.dumps(body)
    runner = CliRunner()
    answers = [
        runner.invoke(app, ["status", run.id, "--json"]).stdout,
        runner.invoke(app, ["logs", run.id]).stdout,
        runner.invoke(app, ["ls", "--json"]).stdout,
    ]
    assert "running in the image" in answers[1]
    assert all(PASSWORD not in a for a in answers)
    for event in Store.open().events(run.id):
        assert PASSWORD not in json.dumps({"reason": event.reason, "data": dict(event.data)})
    leaks = [
        str(p)
        for root in (corral_home, tmp_path / "pods")
        for p in root.rglob("*")
        if p.is_file() and PASSWORD.encode() in p.read_bytes()
    ]
    assert leaks == []
    # a second run with the same credentials reuses RunPod's copy
    again = wait_for_end(submit_run(work / "corral.yaml").run.id, timeout_s=120)
    assert again.state == "SUCCEEDED", again.reason
    assert len(fake.cloud.registry_auths) == 1
    assert fake.creates[-1]["registry"] == auth["id"]


def test_registry_credentials_are_stored_at_v2_registries_once(make_provider, fake) -> None:
    import httpx

    from corral.providers.base import ImageRef

    p = make_provider()
    image = ImageRef(name="ghcr.io/acme/trainer:1.4.0", username="acme-bot", password=PASSWORD)
    first = p._registry_auth(image)
    assert p._registry_auth(image) == first  # found again in the `registries` list
    assert fake.routes("POST /v2/") == ["POST /v2/registries"]
    assert fake.routes("GET /v2/registries") == ["GET /v2/registries"] * 2
    assert list(fake.cloud.registry_auths) == [first]
    # v1's path does not exist in v2: the published document has no such path
    headers = {"Authorization": f"Bearer {API_KEY}", "User-Agent": "corral-test/1"}
    resp = httpx.get(fake.base_url + "/v2/containerregistryauth", headers=headers)
    assert resp.status_code == 404
    [refused] = fake.contract.violations
    assert "PathNotFound" in refused
    fake.contract.violations.clear()  # on purpose: the test sent it
