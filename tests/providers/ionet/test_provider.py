"""IO.net on the fake CaaS: offers from hardware, availability and price estimates; what a
deployment is created with; the agent at the public URL; defensive status strings; replaced
containers as preemptions; prepaid hours extended; the log stream for `corral logs`; errors."""

from __future__ import annotations

import logging
import uuid

import httpx
import pytest

from corral.agent.boot import ENV_BOOT, ENV_PARTS
from corral.errors import InfeasibleRequest, NoCapacity, ProviderError, ProviderUnavailable
from corral.providers.base import Bootstrap, InstanceState, Requirements
from corral.providers.ionet.api import NameTaken
from corral.providers.ionet.bootstrap import ENV_KEY, deployment_name
from corral.providers.ionet.deployments import Deployment, Worker, deployment_state
from support.waiting import wait_until

from ..contract import new_key, provider_plan, wait_state
from .fake_server import API_KEY

H100 = Requirements(gpu_type="H100", gpu_count_min=2, gpu_count_max=2)


def _launch(provider, tmp_path, run="sleep 60", req=H100, env=None):
    key = new_key()
    offer = next(o for o in provider.offers(req) if o.available)
    workdir = tmp_path / key
    workdir.mkdir(parents=True)
    plan = provider_plan(provider, offer, workdir, key, run)
    boot = Bootstrap(plan=plan, token="tok-" + uuid.uuid4().hex, env=env or {})
    return provider.launch(offer, boot, key), boot, offer


def test_offers_price_per_hour_from_estimates_per_location(make_provider, fake):
    provider = make_provider(duration_hours=4)
    offers = provider.offers(H100)
    assert {o.region for o in offers} == {"DE", "US"}
    assert all(o.gpu_type == "H100" and o.gpu_count == 2 and not o.spot for o in offers)
    assert offers[0].price_per_hour == pytest.approx(2.5 * 2 * 1.03)  # the total over 4 h / 4
    assert offers[0].availability == "low" or offers[0].availability == "high"
    assert provider.offers(H100.model_copy(update={"regions": ["de"]}))[0].region == "DE"
    assert provider.offers(Requirements()) == []  # no CPU-only containers
    assert provider.offers(H100.model_copy(update={"spot": True})) == []
    with pytest.raises(InfeasibleRequest, match="at most 4 GPUs"):
        provider.offers(Requirements(gpu_type="RTX4090", gpu_count_min=8))
    with pytest.raises(InfeasibleRequest, match="no hardware is a B200"):
        provider.offers(Requirements(gpu_type="B200", gpu_count_min=1))
    calls = len(fake.routes())
    provider.offers(H100)
    assert len(fake.routes()) == calls  # prices are cached


def test_a_deployment_runs_the_agent_on_its_one_traffic_port(make_provider, fake, tmp_path):
    provider = make_provider()
    inst, boot, offer = _launch(provider, tmp_path, env={"R2_SECRET_ACCESS_KEY": "r2-secret-value"})
    [body] = fake.deploys
    assert body["resource_private_name"] == deployment_name(inst.key)
    assert (body["hardware_id"], body["location_ids"], body["gpus_per_container"]) == (
        offer.details["hardware_id"],
        [offer.details["location_id"]],
        2,
    )
    config = body["container_config"]
    assert config["traffic_port"] == 8750 and config["replica_count"] == 1
    assert config["env_variables"][ENV_KEY] == inst.key
    secret = config["secret_env_variables"]  # the boot blob, in the one delivery format
    parts = int(secret[ENV_PARTS])
    assert sorted(secret) == sorted([ENV_PARTS, *(f"{ENV_BOOT}_{i}" for i in range(parts))])
    assert "r2-secret-value" not in str(config["env_variables"])
    # the details never show secret values, only their keys
    details = provider.api.deployment(inst.instance_id)
    assert details is not None and ENV_BOOT not in str(
        details.container_config.get("env_variables")
    )
    st = wait_state(provider, inst, InstanceState.RUNNING)
    assert st.endpoint == f"{fake.base_url}/proxy/{inst.instance_id}"
    status = wait_until(
        lambda: (
            (
                r := httpx.get(
                    st.endpoint + "/status", headers={"Authorization": f"Bearer {boot.token}"}
                )
            ).status_code
            == 200
            and r.json()
        )
    )
    assert status["run_id"] == boot.plan.run_id
    assert httpx.get(st.endpoint + "/health").json() == {"ok": True}  # IO.net's health check
    provider.terminate(inst)
    assert provider.status(inst).state == InstanceState.TERMINATED


def test_a_replaced_container_is_a_preemption(make_provider, fake, tmp_path):
    provider = make_provider()
    inst, _, _ = _launch(provider, tmp_path)
    wait_state(provider, inst, InstanceState.RUNNING)
    fake.interrupt(inst.instance_id)
    st = wait_state(provider, inst, InstanceState.PREEMPTED)
    assert "node failed" in st.detail
    provider.terminate(inst)


def test_a_running_deployment_is_extended_before_its_hours_run_out(make_provider, fake, tmp_path):
    fake.minutes_per_s = 10.0  # the hour bought lasts 6 s
    provider = make_provider(duration_hours=1, extend_hours=2, extend_below_minutes=45)
    inst, _, _ = _launch(provider, tmp_path)
    wait_state(provider, inst, InstanceState.RUNNING)

    def extended() -> bool:
        provider.status(inst)  # the status poll is what extends a deployment running low
        return any(r.endswith("/extend") for r in fake.routes())

    wait_until(extended, timeout=10, interval=0.2, message="an extension")
    assert fake.deps[inst.instance_id].paid_minutes == 180
    assert provider.status(inst).state == InstanceState.RUNNING
    provider.terminate(inst)


def test_a_deployment_out_of_hours_is_recovered_as_a_preemption(make_provider, fake, tmp_path):
    fake.minutes_per_s = 600.0
    provider = make_provider(duration_hours=1, extend_below_minutes=0)
    inst, _, _ = _launch(provider, tmp_path)
    st = wait_state(provider, inst, InstanceState.PREEMPTED)
    assert "prepaid hours" in st.detail
    provider.terminate(inst)


def test_logs_come_from_the_container_stream_when_the_agent_never_came_up(
    make_provider, fake, tmp_path
):
    provider = make_provider(log_read_s=1.0)
    fake.log_hold_s = 5.0  # the stream stays open: the provider reads, then hangs up
    inst, _, _ = _launch(provider, tmp_path)
    dep = fake.deps[inst.instance_id]
    wait_until(lambda: dep.worker is not None, message="the container")
    # an image without corral: the container prints why and never serves the agent
    dep.worker.container.kill()
    dep.worker.container.argv = [
        "bash",
        "-c",
        "echo 'corral: the image has no corral' >&2; sleep 30",
    ]
    dep.worker.container.start()
    text = wait_until(lambda: provider.logs(inst, tail=50), timeout=15, message="the log")
    assert "the image has no corral" in text
    provider.terminate(inst)


def test_statuses_any_case_and_unknown_ones():
    def dep(status):
        return Deployment(id="d", status=status)

    running = Worker(container_id="c1", device_id="m1", status="RUNNING", public_url="https://x")
    S = InstanceState
    assert deployment_state(None, None, first=None)[0] == S.TERMINATED
    assert deployment_state(dep("DEPLOYMENT REQUESTED"), None, first=None)[0] == S.PROVISIONING
    assert deployment_state(dep("Running"), running, first=None)[0] == S.RUNNING
    assert deployment_state(dep("running"), running, first="m1/c1")[0] == S.RUNNING
    assert deployment_state(dep("running"), running, first="m0/c0")[0] == S.PREEMPTED
    assert deployment_state(dep("running"), None, first="m1/c1")[0] == S.PREEMPTED
    assert deployment_state(dep("running"), None, first=None)[0] == S.PROVISIONING
    stopped = running.model_copy(update={"status": "Exited"})
    assert deployment_state(dep("running"), stopped, first="m1/c1")[0] == S.UNKNOWN
    assert deployment_state(dep("COMPLETED"), None, first=None)[0] == S.PREEMPTED
    assert deployment_state(dep("failed"), None, first=None)[0] == S.FAILED
    assert deployment_state(dep("TERMINATION REQUESTED"), None, first=None)[0] == S.TERMINATED
    assert deployment_state(dep("destroyed"), None, first=None)[0] == S.TERMINATED
    # a word the document does not name: the containers decide (none yet: still starting)
    assert deployment_state(dep("hibernating"), None, first=None)[0] == S.PROVISIONING


def test_an_unknown_container_word_runs_once_the_agent_answers_its_public_url(
    make_provider, fake, tmp_path, caplog
):
    fake.container_word = "Up 3 minutes (healthy)"  # a word IO.net's document never names
    provider = make_provider()
    inst, _, _ = _launch(provider, tmp_path)
    with caplog.at_level(logging.WARNING, logger="corral.providers.ionet"):
        st = wait_state(provider, inst, InstanceState.RUNNING)  # not PROVISIONING until timeout
        for _ in range(5):
            assert provider.status(inst).state == InstanceState.RUNNING
    assert st.endpoint == f"{fake.base_url}/proxy/{inst.instance_id}"
    assert "agent answers" in st.detail
    said = [r for r in caplog.records if "up 3 minutes (healthy)" in r.getMessage()]
    assert len(said) == 1  # once, not per poll
    # the probe went to the container's public URL, without IO.net's key
    assert any(r == "proxy GET /health" for r in fake.routes("proxy"))
    fake.interrupt(inst.instance_id)  # still a preemption: another container replaced it
    assert "node failed" in wait_state(provider, inst, InstanceState.PREEMPTED).detail
    provider.terminate(inst)


def test_an_unknown_deployment_word_lets_the_container_decide(
    make_provider, fake, tmp_path, caplog
):
    fake.running_word = "active"  # not in the document's CaaSResourceStatus
    provider = make_provider()
    inst, _, _ = _launch(provider, tmp_path)
    with caplog.at_level(logging.WARNING, logger="corral.providers.ionet"):
        st = wait_state(provider, inst, InstanceState.RUNNING)
        provider.status(inst)
    assert st.endpoint == f"{fake.base_url}/proxy/{inst.instance_id}"
    assert len([r for r in caplog.records if "'active'" in r.getMessage()]) == 1
    provider.terminate(inst)
    assert provider.status(inst).state == InstanceState.TERMINATED


def test_a_container_whose_agent_is_silent_is_not_running_on_an_unknown_word():
    def dep(status):
        return Deployment(id="d", status=status)

    up = Worker(container_id="c1", device_id="m1", status="starting", public_url="https://x")
    S = InstanceState
    assert deployment_state(dep("running"), up, first=None)[0] == S.PROVISIONING
    assert deployment_state(dep("running"), up, first=None, alive=True)[0] == S.RUNNING
    assert deployment_state(dep("active"), up, first=None, alive=True)[0] == S.RUNNING
    assert deployment_state(dep("active"), up, first=None)[0] == S.PROVISIONING
    assert deployment_state(dep("active"), None, first="m1/c1")[0] == S.UNKNOWN
    assert deployment_state(dep("running"), up, first="m1/c1")[0] == S.UNKNOWN
    no_url = up.model_copy(update={"public_url": None})
    assert deployment_state(dep("running"), no_url, first=None, alive=True)[0] == S.PROVISIONING


def test_an_ambiguous_deploy_is_adopted_not_repeated(make_provider, fake, tmp_path):
    provider = make_provider()
    fake.fail("POST /deploy", 502, body=b"<html><title>502 Bad Gateway</title></html>", after=True)
    inst, _, _ = _launch(provider, tmp_path)
    assert len(fake.deploys) == 1 and [d.id for d in fake.live()] == [inst.instance_id]
    found = provider.find(inst.key)
    assert found is not None and found.instance_id == inst.instance_id
    provider.terminate(inst)


def test_errors_are_one_line_typed_and_keyless(make_provider, fake):
    provider = make_provider()
    fake.fail("GET /hardware/*", 503, body=b"upstream connect error", times=5)
    with pytest.raises(ProviderUnavailable, match="upstream connect error"):
        provider.api.hardware()
    fake.fail(
        "GET /hardware/*", 503, body=b"<html><head><title>Down</title></head></html>", times=5
    )
    with pytest.raises(ProviderUnavailable, match=r"an HTML error page \(Down\)"):
        provider.api.hardware()
    # a body the published document refuses: FastAPI's 422, read as one line
    with pytest.raises(ProviderError, match=r"HTTP 422.*'hardware_id' is a required") as info:
        provider.api.deploy({"resource_private_name": "x"})
    assert API_KEY not in str(info.value) and "\n" not in str(info.value)
    assert len(fake.contract.violations) == 1  # recorded (the teardown would fail the test)
    fake.contract.violations.clear()  # sent on purpose
    bad = make_provider(api_key="io-wrong-key-0000")
    with pytest.raises(ProviderError, match="HTTP 401"):
        bad.api.hardware()


def test_the_leak_sweep_deletes_only_old_deployments_no_run_knows(make_provider, fake, tmp_path):
    provider = make_provider(sweep_min_age_s=0)
    kept, _, _ = _launch(provider, tmp_path)
    leaked, _, _ = _launch(provider, tmp_path)
    assert make_provider(sweep_min_age_s=3600).sweep({kept.key}) == []
    assert provider.sweep({kept.key}) == [leaked.instance_id]
    assert fake.deps[leaked.instance_id].status in ("termination requested", "destroyed")
    assert fake.deps[kept.instance_id].status != "termination requested"
    provider.terminate(kept)


def test_a_429_with_retry_after_is_waited_for_then_retried(make_provider, fake, sleeps):
    provider = make_provider()
    fake.fail("GET /hardware/*", 429, retry_after=3)
    assert provider.api.hardware()
    assert 3 in sleeps  # the Retry-After, not a guess
    fake.limit_per_min = 2  # the fake's own limit: the third request of the minute is a 429
    provider.api.hardware()
    provider.api.hardware()
    with pytest.raises(ProviderError, match="HTTP 429"):
        provider.api.hardware()


def test_the_specs_image_and_its_registry_credentials_are_the_deployments(
    make_provider, fake, tmp_path
):
    from corral.providers.base import ImageRef

    provider = make_provider()
    key = new_key()
    offer = next(o for o in provider.offers(H100) if o.available)
    plan = provider_plan(provider, offer, tmp_path, key)
    secret = "ghp_registry-password-123456"
    image = ImageRef(name="ghcr.io/acme/lm:3", username="acme", password=secret)
    boot = Bootstrap(plan=plan, token="t-" + uuid.uuid4().hex, image=image)
    inst = provider.launch(offer, boot, key)
    [body] = fake.deploys
    assert body["registry_config"] == {
        "image_url": "ghcr.io/acme/lm:3",
        "registry_username": "acme",
        "registry_secret": secret,
    }
    assert secret not in str(body["container_config"])
    assert secret not in str(provider.api.deployment(inst.instance_id))
    provider.terminate(inst)


def test_an_id_that_is_no_uuid_is_no_deployment_and_is_never_sent(make_provider, fake):
    provider = make_provider()
    before = len(fake.routes())
    assert provider.api.deployment("never-launched-274b0cb5") is None  # the API would 422
    assert provider.api.containers("never-launched-274b0cb5") is None
    assert provider.api.delete("3FA85F64-5717-4562-B3FC-2C963F66AFA6-x") is False
    assert len(fake.routes()) == before
    assert provider.api.deployment(str(uuid.uuid4())) is None  # a UUID IO.net does not know
    assert len(fake.routes()) == before + 1


def test_a_409_is_read_per_endpoint_never_as_no_capacity(make_provider, fake, tmp_path):
    provider = make_provider()
    # deploy: the name is taken (the 409 came after IO.net made it): adopted, not "no capacity"
    fake.fail("POST /deploy", 409, after=True)
    inst, _, _ = _launch(provider, tmp_path)
    assert len(fake.deploys) == 1 and [d.id for d in fake.live()] == [inst.instance_id]
    with pytest.raises(NameTaken, match=r"409.*exists"):  # the fake's own answer to a twin
        provider.api.deploy(fake.deploys[0])
    # a read: a plain provider error
    fake.fail("GET /hardware/*", 409)
    with pytest.raises(ProviderError, match="HTTP 409") as info:
        provider.api.hardware()
    assert not isinstance(info.value, NoCapacity)
    # extend: it cannot be extended now
    fake.fail("POST /deployment/*/extend", 409)
    with pytest.raises(ProviderError, match="cannot be extended now") as info:
        provider.api.extend(inst.instance_id, 1)
    assert not isinstance(info.value, NoCapacity)
    # the log stream: a plain provider error too
    worker = wait_until(lambda: provider.api.containers(inst.instance_id), message="container")
    fake.fail("GET /deployment/*/log/*", 409)
    with pytest.raises(ProviderError, match="HTTP 409") as info:
        provider.api.log_lines(inst.instance_id, worker[0].container_id, seconds=1)
    assert not isinstance(info.value, NoCapacity)
    # delete: already ending, accepted; terminate reads the state again
    fake.fail("DELETE /deployment/*", 409, after=True)
    provider.terminate(inst)
    assert fake.deps[inst.instance_id].status in ("termination requested", "destroyed")
