"""SaladCloud's API client against the fake: the key header, ProblemDetails and HTML errors,
429s, quota and name conflicts as typed errors, and no key in any message."""

from __future__ import annotations

import uuid

import pytest

from corral.errors import (
    AuthFailed,
    BadInput,
    Conflict,
    NoCapacity,
    NotYetTerminated,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    RateLimited,
)
from corral.providers.base import Instance, Offer
from corral.providers.http import TokenBucket
from corral.providers.salad import SaladSettings

from .fake_server import API_KEY


def test_every_call_sends_the_key_header_and_a_wrong_key_is_auth_failed(make_provider, fake):
    provider = make_provider()
    assert provider.api.gpu_classes()
    bad = make_provider(api_key="salad_wrong_key_123456")
    with pytest.raises(AuthFailed) as info:
        bad.api.list_groups()
    assert "HTTP 401" in str(info.value) and "salad_wrong_key_123456" not in str(info.value)


def test_an_html_error_page_is_a_clear_one_line_error(make_provider, fake):
    provider = make_provider()
    fake.fail("GET /organizations/*/gpu-classes", 502, html=True, times=5)
    with pytest.raises(ProviderUnavailable) as info:
        provider.api.gpu_classes()
    text = str(info.value)
    assert "an HTML error page (502 Bad Gateway)" in text and "<" not in text and "\n" not in text


def test_a_429_is_retried_and_a_persistent_one_is_rate_limited(make_provider, fake, sleeps):
    provider = make_provider()
    fake.fail("GET /organizations/*/gpu-classes", 429, times=1)
    assert provider.api.gpu_classes()  # retried after a backoff (no Retry-After from Salad)
    assert sleeps.calls
    fake.fail("GET /organizations/*/gpu-classes", 429, retry_after=2, times=10)
    with pytest.raises(RateLimited) as info:
        provider.api.gpu_classes()
    assert info.value.retry_after == 2


def test_the_fake_enforces_240_a_minute_and_the_shared_bucket_stays_under_it(make_provider, fake):
    class Clock:
        t = 0.0

        def now(self) -> float:
            return self.t

        def sleep(self, s: float) -> None:
            self.t += s

    clock = Clock()
    fake.clock = clock.now  # the fake's window runs on the same fake time
    bucket = TokenBucket(200 / 60.0, 10, clock=clock.now, sleep=clock.sleep)
    providers = [make_provider(bucket=bucket) for _ in range(5)]  # five runs, one key
    for i in range(300):
        providers[i % 5].api.gpu_classes()
    assert not [s for s in fake.seen if s.status == 429]
    assert fake.peak_per_min <= 210
    assert clock.t > 60  # 300 requests took more than a minute of (fake) time


#: the least body SaladCloud's document takes for a create
BODY = {
    "name": "corral-x1",
    "autostart_policy": False,
    "restart_policy": "never",
    "replicas": 1,
    "container": {"image": "python:3.11", "resources": {"cpu": 1, "memory": 1024}},
}


def test_quota_and_name_conflicts_are_typed(make_provider, fake):
    provider = make_provider()
    fake.fail("POST /organizations/*/containers", 403, detail="Container replica quota exceeded")
    with pytest.raises(QuotaExceeded):
        provider.api.create_group(BODY)
    fake.fail("POST /organizations/*/containers", 403, detail="Forbidden")
    with pytest.raises(AuthFailed):
        provider.api.create_group(BODY)
    fake.fail("POST /organizations/*/containers", 409, detail="The name is taken")
    with pytest.raises(Conflict):
        provider.api.create_group(BODY)


def test_settings_name_the_missing_organization_and_bad_values(monkeypatch):
    with pytest.raises(BadInput, match="CORRAL_SALAD_ORGANIZATION"):
        SaladSettings().where()
    with pytest.raises(BadInput, match="CORRAL_SALAD_PRIORITIES"):
        SaladSettings.from_env({"CORRAL_SALAD_PRIORITIES": "urgent"})
    with pytest.raises(BadInput, match="CORRAL_SALAD_ORGANIZATION"):
        SaladSettings.from_env({"CORRAL_SALAD_ORGANIZATION": "Bad_Name"})
    with pytest.raises(BadInput, match="REQUESTS_PER_MINUTE"):
        SaladSettings.from_env({"CORRAL_SALAD_REQUESTS_PER_MINUTE": "500"})
    with pytest.raises(BadInput, match=r"CORRAL_SALAD_GATEWAY_URL: .*with \{dns\}"):
        SaladSettings.from_env({"CORRAL_SALAD_GATEWAY_URL": "http://proxy.test/gw"})
    assert SaladSettings().gateway("a-b.salad.cloud") == "https://a-b.salad.cloud"
    proxied = SaladSettings(gateway_url="http://127.0.0.1:9/gw/{dns}")
    assert proxied.gateway("a-b.salad.cloud") == "http://127.0.0.1:9/gw/a-b.salad.cloud"
    s = SaladSettings.from_env(
        {"CORRAL_SALAD_ORGANIZATION": "acme", "CORRAL_SALAD_COUNTRY_CODES": "US, de"}
    )
    assert s.country_codes == ["us", "de"]


def test_no_error_or_log_line_holds_the_key(make_provider, fake, caplog):
    provider = make_provider()
    fake.fail("GET *", 500, times=50)
    for call in (provider.api.gpu_classes, provider.api.list_groups):
        with pytest.raises(ProviderError) as info:
            call()
        assert API_KEY not in str(info.value)
    assert API_KEY not in caplog.text


def test_a_controller_without_an_organization_leaves_salad_out_with_the_reason(monkeypatch):
    from corral.control.providers import load_providers

    monkeypatch.setenv("SALAD_API_KEY", API_KEY)
    monkeypatch.delenv("CORRAL_SALAD_ORGANIZATION", raising=False)
    providers, skipped = load_providers(["salad"])
    assert providers == {} and "CORRAL_SALAD_ORGANIZATION" in skipped["salad"]
    monkeypatch.delenv("SALAD_API_KEY")
    _, skipped = load_providers(["salad"])
    assert "corral secret set SALAD_API_KEY" in skipped["salad"]


def test_a_409_says_what_it_means_on_each_call_never_no_capacity(make_provider, fake):
    provider = make_provider()
    group = provider.api.create_group(BODY)
    name = group.name
    inst = Instance(
        provider="salad", instance_id=name, key="k1-a1", offer=Offer(provider="salad", offer_id="o")
    )
    calls = {
        "POST /organizations/*/containers": (
            lambda: provider.api.create_group(BODY),
            Conflict,
            "of that name exists",
        ),
        f"POST /organizations/*/containers/{name}/start": (
            lambda: provider.start(inst),
            Conflict,
            "cannot be started",
        ),
        f"POST /organizations/*/containers/{name}/stop": (
            lambda: provider.stop(inst),
            Conflict,
            "cannot be stopped",
        ),
        f"DELETE /organizations/*/containers/{name}": (
            lambda: provider.terminate(inst),
            NotYetTerminated,  # the controller calls again later
            "cannot be deleted yet",
        ),
        "POST /organizations/*/instances/*/reallocate": (
            lambda: provider.api.reallocate(name, str(uuid.uuid4())),
            Conflict,
            "cannot be reallocated",
        ),
    }
    for target, (call, kind, meaning) in calls.items():
        fake.fail(target, 409, detail="Conflict")
        with pytest.raises(kind, match=meaning) as info:
            call()
        assert not isinstance(info.value, NoCapacity), target
    assert name in fake.cloud.groups  # the refused delete deleted nothing
    assert not provider.memory.get(name).get("stopped")  # the refused stop is not remembered
    provider.terminate(inst)
    assert name not in fake.cloud.groups
