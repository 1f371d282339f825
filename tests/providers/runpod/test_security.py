"""The API key and the agent token never show (logs, errors, instances); the CDN's rule on
User-Agents; bad or missing keys; the provider built the way the controller builds it."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request

import httpx
import pytest

from corral.errors import AuthFailed, BadInput, CorralError, ProviderError
from corral.providers.base import InstanceState, Requirements
from corral.providers.registry import get_provider
from corral.providers.runpod import RunPodProvider, RunPodSettings
from corral.secrets import SecretStore

from ..contract import new_key, wait_state
from .fake_server import API_KEY
from .helpers import L40S, bootstrap, offer


def test_cdn_rejects_requests_without_a_user_agent_and_corral_always_sends_one(make_provider, fake):
    with httpx.Client() as raw:
        raw.headers.pop("User-Agent")
        resp = raw.get(fake.base_url + "/v2/pods", headers={"Authorization": f"Bearer {API_KEY}"})
    assert (resp.status_code, resp.text) == (403, "error code: 1010")
    request = urllib.request.Request(fake.base_url + "/graphql", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=5)
    assert err.value.code == 403  # Python-urllib's default agent
    fake.seen.clear()
    make_provider().offers(L40S)
    assert fake.seen and all(s.user_agent.startswith("corral/") for s in fake.seen)


def test_a_cdn_rejection_is_not_mistaken_for_a_bad_key(make_provider):
    p = make_provider()
    with pytest.raises(ProviderError, match="is the User-Agent set") as err:
        p.api.rest.request("GET", "/pods", headers={"User-Agent": "Python-urllib/3.11"})
    assert not isinstance(err.value, AuthFailed)


def test_a_wrong_key_is_auth_failed_and_never_shown(make_provider):
    wrong = "rpa_WRONGKEY0123456789xyz"
    p = make_provider(api_key=wrong)
    with pytest.raises(AuthFailed) as err:
        p.offers(L40S)
    assert wrong not in str(err.value) and wrong not in repr(err.value.to_dict())


def test_no_key_anywhere_refuses_to_start_and_says_how_to_set_one(fake, monkeypatch):
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    monkeypatch.delenv("CORRAL_RUNPOD_API_KEY", raising=False)
    with pytest.raises(AuthFailed, match="corral secret set RUNPOD_API_KEY"):
        RunPodProvider(settings=RunPodSettings(**fake.settings()))


def test_the_controller_builds_it_from_the_secret_store_and_the_environment(
    fake, corral_home, monkeypatch
):
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    for name, value in fake.settings().items():
        monkeypatch.setenv(f"CORRAL_RUNPOD_{name.upper()}", value)
    monkeypatch.setenv("CORRAL_RUNPOD_CLOUD_TYPES", "secure")
    SecretStore(corral_home).set("RUNPOD_API_KEY", API_KEY)
    p = get_provider("runpod")
    assert isinstance(p, RunPodProvider)
    offers = p.offers(L40S)
    assert offers and {o.details["cloud_type"] for o in offers} == {"SECURE"}
    p.close()


def test_the_key_is_read_under_corrals_name_and_runpods_own_corrals_first(
    fake, corral_home, monkeypatch
):
    """RUNPOD_API_KEY (RunPod's guides, runpodctl) works alone; CORRAL_RUNPOD_API_KEY wins
    when both are set (in a pod, RUNPOD_API_KEY holds the pod's own key); each name is read
    from the secret store, then the environment, before the next."""
    settings = RunPodSettings(**fake.settings(), rate_per_s=None)
    wrong = "rpa_WRONGKEY0123456789xyz"
    monkeypatch.delenv("CORRAL_RUNPOD_API_KEY", raising=False)
    monkeypatch.setenv("RUNPOD_API_KEY", API_KEY)  # RunPod's name alone
    p = RunPodProvider(settings=settings)
    assert p.offers(L40S)
    p.close()
    monkeypatch.setenv("CORRAL_RUNPOD_API_KEY", API_KEY)  # both: corral's own wins
    monkeypatch.setenv("RUNPOD_API_KEY", wrong)
    p = RunPodProvider(settings=settings)
    assert p.offers(L40S)
    p.close()
    monkeypatch.setenv("CORRAL_RUNPOD_API_KEY", wrong)
    SecretStore(corral_home).set("CORRAL_RUNPOD_API_KEY", API_KEY)  # the store, then the env
    p = RunPodProvider(settings=settings)
    assert p.offers(L40S)
    p.close()


def test_settings_from_the_environment_name_the_bad_variable():
    env = {"CORRAL_RUNPOD_AGENT_PORT": "9000", "CORRAL_RUNPOD_RATE_PER_S": "none"}
    s = RunPodSettings.from_env(env)
    assert (s.agent_port, s.rate_per_s) == (9000, None)
    with pytest.raises(BadInput, match="CORRAL_RUNPOD_AGENT_PORT"):
        RunPodSettings.from_env({"CORRAL_RUNPOD_AGENT_PORT": "eighty"})
    with pytest.raises(BadInput, match="CORRAL_RUNPOD_CLOUD_TYPES"):
        RunPodSettings.from_env({"CORRAL_RUNPOD_CLOUD_TYPES": "moon"})
    with pytest.raises(BadInput, match="needs \\{pod_id\\} and \\{port\\}"):
        RunPodSettings.from_env({}, proxy_url="https://proxy.example/{pod_id}")


def test_key_and_token_are_in_no_log_error_or_instance(make_provider, fake, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    p = make_provider()
    key = new_key()
    bs = bootstrap(tmp_path, key, env={"WANDB_API_KEY": "wandb-secret-value-123"})
    secrets = [API_KEY, bs.token, "wandb-secret-value-123"]
    errors: list[CorralError] = []
    fake.fail("POST /v2/pods", 500, after=True, body={"message": f"boom {API_KEY}"})
    fake.fail("GET /v2/pods/*", 429, retry_after=1)
    inst = p.launch(offer(p, spot=False), bs, key)
    wait_state(p, inst, InstanceState.RUNNING)
    fake.fail("POST /v2/pods", 400, body={"message": f"bad token {bs.token} Bearer {API_KEY}"})
    try:
        p.launch(offer(p, spot=False), bootstrap(tmp_path, "rother-a1"), "rother-a1")
    except CorralError as exc:
        errors.append(exc)
    try:
        make_provider(api_key="rpa_other_wrong_key_99").offers(Requirements(gpu_count_min=1))
    except CorralError as exc:
        errors.append(exc)
    p.terminate(inst)
    assert [type(e).__name__ for e in errors] == ["ProviderError", "AuthFailed"]
    assert "bad token ***" in errors[0].message  # the provider's message, scrubbed
    shown = caplog.text + "".join(str(e) + repr(e.to_dict()) for e in errors)
    shown += inst.model_dump_json() + "".join(i.model_dump_json() for i in p.list_instances())
    for secret in [*secrets, "rpa_other_wrong_key_99"]:
        assert secret not in shown
