"""RunPod's request budget: one bucket per API key whoever sends (REST and GraphQL, every
provider object of the process), and RunPod's own ``RateLimit`` header holding it off, so a
spent window is waited out instead of answered with 429s."""

from __future__ import annotations

import httpx

from corral.providers.http import RetryPolicy
from corral.providers.runpod import RunPodProvider, RunPodSettings
from corral.providers.runpod.api import RunPodAPI
from corral.providers.runpod.limits import exhausted_for

from .fake_server import API_KEY


class Clock:
    """A clock that only sleeping moves (the provider's and the fake's alike)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_rate_limit_header_says_how_long_until_a_spent_window_resets():
    assert exhausted_for('"minute";r=0;t=12, "hour";r=2800;t=1812') == 12
    assert exhausted_for('"minute";r=0;t=12, "hour";r=0;t=1812') == 1812
    assert exhausted_for('"minute";r=3;t=12') is None
    assert exhausted_for(None) is None and exhausted_for("garbage;;=") is None


def test_one_bucket_per_api_key_for_every_client_of_the_process():
    settings = RunPodSettings(rate_per_s=5.0)
    with httpx.Client() as c1, httpx.Client() as c2:
        a = RunPodAPI("rpa_KEY_ONE_0123456789", settings, client=c1)
        b = RunPodAPI("rpa_KEY_ONE_0123456789", settings, client=c2)
        other = RunPodAPI("rpa_KEY_TWO_0123456789", settings, client=c2)
        assert a.rest.bucket is b.rest.bucket is a.gql.bucket is b.gql.bucket
        assert other.rest.bucket is not a.rest.bucket


def test_a_spent_window_is_waited_out_before_the_next_request(fake, corral_home):
    clock = Clock()
    fake.rest._clock = clock  # the fake's minute window runs on the same clock
    fake.rest._window = (clock(), 0)
    fake.rest.quota_per_minute = 2
    with httpx.Client() as client:
        p = RunPodProvider(
            API_KEY,
            settings=RunPodSettings(**fake.settings(), rate_per_s=None),
            client=client,
            home=corral_home,
            retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
            sleep=clock.sleep,
            clock=clock,
        )
        for _ in range(3):
            assert p.api.list_pods() == []
    statuses = [s.status for s in fake.seen if s.route == "GET /v2/pods"]
    assert statuses == [200, 200, 200]  # never a 429: RunPod said r=0 and the bucket waited
    assert len(clock.slept) == 1 and 50 <= clock.slept[0] <= 60
