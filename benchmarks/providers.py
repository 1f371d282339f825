"""Provider API budgets: how many API calls each container provider's watcher makes.

    python benchmarks/providers.py [--json] [--runs 100] [--hours 1]

The controller asks a provider for the status of every live run every ``provider_poll_s``
(5 s). Each provider answers from its own caches where it can; this measures the HTTP calls
that reach the API, on a simulated clock (an hour of polling takes a few seconds), against an
in-process stand-in of each API (``httpx.MockTransport``) where every run is steadily running:

* ``salad_calls_per_run_hour``, ``ionet_calls_per_run_hour``: one run watched for an hour;
* ``salad_peak_per_min_100_runs``: 100 SaladCloud runs under one controller (one API key),
  the most requests in any 60 s window; SaladCloud allows 240 a minute per key.

Baseline, measured in the same run: the same watchers without the caches and the shared
request bucket (every status call reads the group or deployment and its instances), what a
per-run watcher would send.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from corral.providers.base import Instance, Offer
from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.ionet import IonetProvider, IonetSettings
from corral.providers.ionet.bootstrap import ENV_KEY as IONET_KEY
from corral.providers.ionet.bootstrap import deployment_name
from corral.providers.salad import SaladProvider, SaladSettings
from corral.providers.salad.bootstrap import ENV_KEY as SALAD_KEY
from corral.providers.salad.bootstrap import group_name

POLL_S = 5.0  # the controller's provider_poll_s
SALAD_LIMIT = 240


class Clock:
    """Simulated monotonic time: moves when the provider's rate limiter sleeps, or the loop."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(0.0, s)


class Api:
    """Answers the few reads a watcher makes, and records when each request came."""

    def __init__(self, clock: Clock, answer: Callable[[httpx.Request], Any]) -> None:
        self.clock = clock
        self.answer = answer
        self.times: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.times.append(self.clock.t)
        return httpx.Response(200, json=self.answer(request))

    def peak_per_min(self) -> int:
        times = sorted(self.times)
        return max(
            (i + 1 - bisect_left(times, t - 60.0 + 1e-9) for i, t in enumerate(times)), default=0
        )


def _salad(runs: int, cached: bool, hours: float, home: Path) -> Api:
    clock = Clock()
    keys = [f"bench-{uuid.uuid4().hex[:8]}-a1" for _ in range(runs)]
    group = {
        "container": {},
        "networking": {"dns": "x.salad.cloud"},
        "current_state": {"status": "running", "instance_status_counts": {"running_count": 1}},
    }

    def answer(req: httpx.Request) -> Any:
        path = req.url.path
        if path.endswith("/instances"):
            return {"instances": [{"id": "i1", "machine_id": "m1", "state": "running"}]}
        if path.endswith("/containers"):  # pages of at most 100, as SaladCloud answers
            size = min(int(req.url.params.get("page_size") or 100), 100)
            first = (int(req.url.params.get("page") or 1) - 1) * size
            return {
                "items": [
                    {
                        **group,
                        "name": group_name(k),
                        "container": {"environment_variables": {SALAD_KEY: k}},
                    }
                    for k in keys[first : first + size]
                ]
            }
        name = path.rsplit("/", 1)[1]
        key = next(k for k in keys if group_name(k) == name)
        return {**group, "name": name, "container": {"environment_variables": {SALAD_KEY: key}}}

    api = Api(clock, answer)
    settings = SaladSettings(
        api_url="https://api.test/api/public",
        organization="acme",
        project="bench",
        **({} if cached else {"list_cache_s": 0, "instances_cache_s": 0}),
    )
    bucket = (
        TokenBucket(
            settings.requests_per_minute / 60, settings.burst, clock=clock.now, sleep=clock.sleep
        )
        if cached
        else TokenBucket(1e9, 1e9, clock=clock.now, sleep=clock.sleep)
    )
    provider = SaladProvider(
        "bench-key",
        settings=settings,
        client=httpx.Client(transport=httpx.MockTransport(api)),
        home=home / f"salad-{runs}-{cached}",
        retry=RetryPolicy(max_attempts=1),
        bucket=bucket,
        sleep=clock.sleep,
        clock=clock.now,
    )
    offer = Offer(provider="salad", offer_id="c:batch", details={"priority": "batch"})
    instances = [
        Instance(provider="salad", instance_id=group_name(k), key=k, offer=offer) for k in keys
    ]
    _watch(provider, instances, clock, hours, api, cached)
    return api


def _ionet(runs: int, cached: bool, hours: float, home: Path) -> Api:
    clock = Clock()
    keys = [f"bench-{uuid.uuid4().hex[:8]}-a1" for _ in range(runs)]
    ids = {k: str(uuid.uuid4()) for k in keys}

    def answer(req: httpx.Request) -> Any:
        path = req.url.path
        if path.endswith("/deployments"):
            rows = [
                {
                    "id": ids[k],
                    "status": "RUNNING",
                    "name": deployment_name(k),
                    "compute_minutes_remaining": 600,
                }
                for k in keys
            ]
            return {"data": {"deployments": rows, "total": len(rows)}}
        if path.endswith("/containers"):
            worker = {
                "container_id": "c1",
                "device_id": "d1",
                "status": "running",
                "public_url": "https://x",
            }
            return {"data": {"total": 1, "workers": [worker]}}
        dep_id = path.rsplit("/", 1)[1]
        key = next(k for k, v in ids.items() if v == dep_id)
        return {
            "data": {
                "id": dep_id,
                "status": "running",
                "compute_minutes_remaining": 600,
                "container_config": {"env_variables": {IONET_KEY: key}},
            }
        }

    api = Api(clock, answer)
    settings = IonetSettings(
        api_url="https://api.test/caas",
        **({} if cached else {"list_cache_s": 0, "containers_cache_s": 0}),
    )
    provider = IonetProvider(
        "bench-key",
        settings=settings,
        client=httpx.Client(transport=httpx.MockTransport(api)),
        home=home / f"ionet-{runs}-{cached}",
        retry=RetryPolicy(max_attempts=1),
        bucket=TokenBucket(1e9, 1e9, clock=clock.now, sleep=clock.sleep),
        sleep=clock.sleep,
        clock=clock.now,
    )
    offer = Offer(provider="ionet", offer_id="7:1:9", details={"hardware_id": 7, "location_id": 9})
    instances = [Instance(provider="ionet", instance_id=ids[k], key=k, offer=offer) for k in keys]
    _watch(provider, instances, clock, hours, api, cached)
    return api


def _watch(
    provider: Any, instances: list[Instance], clock: Clock, hours: float, api: Api, cached: bool
) -> None:
    """The controller's preemption watcher: every run's status every POLL_S seconds. Without
    the caches the baseline reads each run directly (group/deployment and its instances)."""
    end = clock.t + hours * 3600
    while clock.t < end:
        tick = clock.t
        for inst in instances:
            if cached:
                provider.status(inst)
            elif isinstance(provider, SaladProvider):  # a per-run watcher: group + instances
                provider.api.get_group(inst.instance_id)
                provider.api.instances(inst.instance_id)
            else:  # deployment + containers
                provider.api.deployment(inst.instance_id)
                provider.api.containers(inst.instance_id)
        clock.t = max(clock.t, tick + POLL_S)


def measure(runs: int, hours: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        salad_one = _salad(1, True, hours, home)
        ionet_one = _ionet(1, True, hours, home)
        salad_many = _salad(runs, True, min(hours, 0.25), home)
        base_salad = _salad(1, False, hours, home)
        base_ionet = _ionet(1, False, hours, home)
        base_many = _salad(runs, False, 5 / 60, home)
    return {
        "salad_calls_per_run_hour": round(len(salad_one.times) / hours),
        "ionet_calls_per_run_hour": round(len(ionet_one.times) / hours),
        "salad_peak_per_min_100_runs": salad_many.peak_per_min(),
        "runs": runs,
        "salad_limit_per_min": SALAD_LIMIT,
        "baseline_salad_calls_per_run_hour": round(len(base_salad.times) / hours),
        "baseline_ionet_calls_per_run_hour": round(len(base_ionet.times) / hours),
        "baseline_salad_peak_per_min_100_runs": base_many.peak_per_min(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=100, help="concurrent SaladCloud runs")
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours of watching")
    args = parser.parse_args()
    out = measure(args.runs, args.hours)
    if args.json:
        print(json.dumps(out))
        return
    ok = out["salad_peak_per_min_100_runs"] < SALAD_LIMIT
    rows = [
        (
            "salad calls per run-hour",
            out["salad_calls_per_run_hour"],
            out["baseline_salad_calls_per_run_hour"],
            "",
        ),
        (
            "ionet calls per run-hour",
            out["ionet_calls_per_run_hour"],
            out["baseline_ionet_calls_per_run_hour"],
            "",
        ),
        (
            f"salad peak per min, {args.runs} runs",
            out["salad_peak_per_min_100_runs"],
            out["baseline_salad_peak_per_min_100_runs"],
            f"< {SALAD_LIMIT}: {'yes' if ok else 'NO'}",
        ),
    ]
    print(f"{'measure':<32} {'corral':>8} {'baseline':>9}  target")
    for name, value, base, target in rows:
        print(f"{name:<32} {value:>8} {base:>9}  {target}")
    print("baseline: the same watchers without the shared listing, caches and request bucket")


if __name__ == "__main__":
    main()
