"""Launching on the fake SaladCloud: what a container group is created with, the agent behind
the container gateway, the platform's probes, idempotent launches and adoption."""

from __future__ import annotations

import httpx
import pytest

from corral.errors import BadInput, InfeasibleRequest
from corral.providers.base import InstanceState, Requirements
from corral.providers.salad.bootstrap import ENV_KEY, MAX_VALUE, group_name, one_line
from support.waiting import wait_until

from ..contract import new_key, wait_state
from .helpers import RTX3090, bootstrap, offer


def test_offers_are_gpu_classes_at_each_priority_with_decimal_prices(make_provider):
    provider = make_provider()
    offers = provider.offers(RTX3090)
    by_priority = {o.details["priority"]: o for o in offers}
    assert set(by_priority) == {"high", "medium", "low", "batch"}
    assert by_priority["batch"].price_per_hour == 0.1 and by_priority["high"].price_per_hour == 0.25
    assert not by_priority["high"].spot and by_priority["batch"].spot
    assert [o.price_per_hour for o in offers] == sorted(o.price_per_hour for o in offers)
    assert provider.offers(RTX3090.model_copy(update={"spot": False})) == [by_priority["high"]]
    eight = provider.offers(Requirements(gpu_type="L40S", gpu_count_min=8, gpu_count_max=8))
    assert eight and all(o.gpu_count == 8 for o in eight)
    high_demand = provider.offers(Requirements(gpu_type="RTX4090", gpu_count_min=1))
    assert {o.availability for o in high_demand} == {"low"}
    with pytest.raises(InfeasibleRequest, match="RTX3090"):
        provider.offers(Requirements(gpu_type="H200", gpu_count_min=1))
    cpu = provider.offers(Requirements(cpus=8, memory_gb=16))
    assert [(o.gpu_count, o.cpus, o.details["price_estimated"]) for o in cpu] == [(0, 8.0, True)]
    assert provider.offers(Requirements(gpu_count_min=1, regions=["us", "ca"]))[0].region == "us,ca"


def test_a_group_is_created_with_one_replica_probes_gateway_and_short_env_values(
    make_provider, fake, tmp_path
):
    provider = make_provider(registry_username="bot")
    key = new_key()
    chosen = offer(provider, priority="low")
    secret = "s" * 3000  # longer than one environment value may be
    with pytest.raises(Exception, match="SALAD_REGISTRY_PASSWORD"):
        provider.launch(chosen, bootstrap(provider, chosen, tmp_path, key), key)
    provider = make_provider()
    boot = bootstrap(provider, chosen, tmp_path, key, env={"HF_TOKEN": secret})
    inst = provider.launch(chosen, boot, key)
    [body] = fake.creates
    assert body["name"] == inst.instance_id == group_name(key)
    assert (body["replicas"], body["autostart_policy"], body["restart_policy"]) == (
        1,
        True,
        "never",
    )
    container = body["container"]
    assert container["priority"] == "low"
    assert container["resources"]["gpu_classes"] == [chosen.details["gpu_class_id"]]
    assert container["command"][:2] == ["bash", "-c"]
    env = container["environment_variables"]
    assert env[ENV_KEY] == key and all(len(v) <= MAX_VALUE for v in env.values())
    assert all(one_line(v) for v in env.values())  # SaladCloud's values are one line
    assert secret not in str(env) and boot.token not in str(env)  # packed, never in plain
    assert body["networking"]["port"] == 8750 and body["networking"]["auth"] is False
    startup = body["startup_probe"]
    assert startup["http"]["path"] == "/health"
    # within SaladCloud's 1-20 failures, and still 10 minutes to pull, install and start
    assert 1 <= startup["failure_threshold"] <= 20
    assert startup["failure_threshold"] * startup["period_seconds"] == 600
    assert body["liveness_probe"]["http"]["path"] == "/health"
    assert body["readiness_probe"]["http"]["path"] == "/ready"
    st = wait_state(provider, inst, InstanceState.RUNNING)
    assert st.endpoint and st.endpoint.endswith(f"/gw/{inst.instance_id}.salad.test")
    # the agent answers through the gateway: its token for the API, none for the probes
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
    assert httpx.get(st.endpoint + "/health").json() == {"ok": True}
    assert httpx.get(st.endpoint + "/status").status_code == 401
    # SaladCloud's readiness probe reaches the agent's /ready
    wait_until(
        lambda: provider.api.instances(inst.instance_id)[0].ready, message="the replica ready"
    )
    # the node hook told which machine this is, through the agent's events
    events = httpx.get(
        st.endpoint + "/events", headers={"Authorization": f"Bearer {boot.token}"}
    ).json()["events"]
    [info] = [e for e in events if e["type"] == "node.info"]
    replica = provider.api.instances(inst.instance_id)[0]
    assert info["data"]["machine_id"] == replica.machine_id
    assert info["data"]["container_group"] == inst.instance_id
    wait_until(lambda: fake.cloud.groups[inst.instance_id].deletion_costs == [100000])
    provider.terminate(inst)
    assert fake.cloud.groups == {}


def test_an_ambiguous_create_is_adopted_not_repeated(make_provider, fake, tmp_path):
    provider = make_provider()
    key = new_key()
    chosen = offer(provider)
    fake.fail("POST /organizations/*/containers", 500, html=True, after=True)
    inst = provider.launch(chosen, bootstrap(provider, chosen, tmp_path, key), key)
    assert len(fake.creates) == 1 and list(fake.cloud.groups) == [inst.instance_id]
    again = provider.launch(chosen, bootstrap(provider, chosen, tmp_path, key), key)
    assert again.instance_id == inst.instance_id and len(fake.creates) == 1
    found = provider.find(key)
    assert found is not None and found.offer.offer_id == chosen.offer_id
    provider.terminate(inst)


def test_a_group_of_another_key_under_the_name_is_never_adopted(make_provider, fake, tmp_path):
    provider = make_provider()
    key = new_key()
    chosen = offer(provider)
    inst = provider.launch(chosen, bootstrap(provider, chosen, tmp_path, key), key)
    env = fake.cloud.groups[inst.instance_id].body["container"]["environment_variables"]
    env[ENV_KEY] = "someone-else-a1"
    assert provider.find(key) is None
    assert provider.status(inst).state == InstanceState.TERMINATED  # not ours
    provider.terminate(inst)  # never deletes a group that is not ours
    assert inst.instance_id in fake.cloud.groups


def test_a_non_salad_offer_is_bad_input(make_provider, tmp_path):
    provider = make_provider()
    chosen = offer(provider)
    with pytest.raises(BadInput):
        provider.launch(chosen.model_copy(update={"provider": "aws"}), None, new_key())  # type: ignore[arg-type]


def test_the_node_profile_documents_the_interruption_rate_of_the_priority(make_provider):
    provider = make_provider()
    batch, high = offer(provider, priority="batch"), offer(provider, priority="high")
    assert provider.node_profile(batch, "r-1").interruptions_per_hour == 1.1
    assert provider.node_profile(high, "r-1").interruptions_per_hour == 0.1


def test_logs_come_from_the_log_service(make_provider, fake, tmp_path):
    provider = make_provider()
    key = new_key()
    chosen = offer(provider)
    # an image without python: the container says so and exits, and no agent ever serves
    fake.cloud.command_override = ["bash", "-c", "echo 'corral: the image has no python'; exit 127"]
    inst = provider.launch(chosen, bootstrap(provider, chosen, tmp_path, key), key)
    text = wait_until(lambda: provider.logs(inst, tail=20), interval=0.5, message="the log")
    assert "the image has no python" in text
    [query] = [r for r in fake.routes() if r.endswith("/log-entries")][-1:]
    assert query.startswith("POST ")
    provider.terminate(inst)


def test_the_specs_image_and_its_registry_credentials_are_the_groups(make_provider, fake, tmp_path):
    from corral.providers.base import ImageRef

    provider = make_provider()
    key = new_key()
    chosen = offer(provider)
    boot = bootstrap(provider, chosen, tmp_path, key)
    secret = "ghp_registry-password-123456"
    boot = boot.model_copy(
        update={"image": ImageRef(name="ghcr.io/acme/train:2", username="acme", password=secret)}
    )
    inst = provider.launch(chosen, boot, key)
    [body] = fake.creates
    assert body["container"]["image"] == "ghcr.io/acme/train:2"
    assert body["container"]["registry_authentication"] == {
        "basic": {"username": "acme", "password": secret}
    }
    assert secret not in str(body["container"]["environment_variables"])
    assert secret not in str(provider.api.get_group(inst.instance_id))  # never echoed back
    provider.terminate(inst)
