"""Planner speed: choosing among 10,000 offers from 5 providers.

    python benchmarks/planner.py [--json] [--offers 10000] [--providers 5] [--repeat 21]

Five in-memory providers hold 10,000 synthetic offers between them (six GPU types, 1-8 GPUs,
six regions each, spot and on-demand, about 80 % available). Measured, as the median of
--repeat runs:

* ``plan_10k_s``: ``planner.plan()`` for a typical request (A100 x1, spot auto, at most
  $4/h, three regions), against a naive baseline in the same run: providers asked one after
  the other, every offer copied through pydantic validation, requirements re-read per offer,
  a Python sort key (``baseline_10k_s``); and the same without the validation
  (``simple_10k_s``). All must give the same offers in the same order.
* ``plan_all_10k_s``: a request with no limits (all 10,000 offers kept and sorted).
* ``plan_5x50ms_s``: five providers that each take 50 ms to answer (a cloud API round trip),
  against asking them one after the other (``serial_5x50ms_s``).

Target: ``plan_10k_s`` under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

from corral.control import planner
from corral.providers.base import Offer, Provider, Requirements

TARGET_S = 0.050
GPUS = {"A100": 1.6, "H100": 3.0, "L40S": 0.9, "A10G": 0.7, "T4": 0.35, "L4": 0.5}
TYPICAL = Requirements(
    gpu_type="A100",
    gpu_count_min=1,
    gpu_count_max=1,
    max_hourly_price=4.0,
    regions=["region-0", "region-1", "region-2"],
)


class MemoryProvider(Provider):
    """Answers ``offers`` from a list in memory, after ``delay_s`` (a simulated round trip)."""

    name: ClassVar[str] = "memory"

    def __init__(self, offers: list[Offer], delay_s: float = 0.0):
        self._offers = offers
        self.delay_s = delay_s

    def offers(self, req: Requirements) -> list[Offer]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self._offers

    def launch(self, offer, bootstrap, key):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def status(self, instance):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def terminate(self, instance):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def find(self, key):  # type: ignore[no-untyped-def]
        return None


def synthetic_offers(provider: str, n: int, rng: random.Random) -> list[Offer]:
    """``n`` offers of one provider: machine kinds sold spot and on-demand."""
    out: list[Offer] = []
    i = 0
    while len(out) < n:
        gpu = rng.choice(list(GPUS))
        count = rng.choice([1, 1, 2, 4, 8])
        region = f"region-{rng.randrange(6)}"
        on_demand = round(GPUS[gpu] * count * rng.uniform(0.8, 1.6), 4)
        machine = f"{gpu.lower()}-{count}x-{i}"
        for spot in (False, True):
            if len(out) == n:
                break
            price = round(on_demand * rng.uniform(0.3, 0.5), 4) if spot else on_demand
            available = rng.random() < 0.8
            out.append(
                Offer(
                    provider=provider,
                    offer_id=f"{machine}:{'spot' if spot else 'on-demand'}",
                    region=region,
                    gpu_type=gpu,
                    gpu_count=count,
                    cpus=8.0 * count,
                    memory_gb=64.0 * count,
                    spot=spot,
                    price_per_hour=price,
                    available=available,
                    availability="high" if available else "none",
                    catalog_date="2025-06-01",
                    details={"machine": machine},
                )
            )
        i += 1
    return out


def build(total: int, count: int, delay_s: float = 0.0, seed: int = 7) -> dict[str, Provider]:
    rng = random.Random(seed)
    share = [total // count + (1 if i < total % count else 0) for i in range(count)]
    names = [f"cloud-{chr(ord('a') + i)}" for i in range(count)]
    return {
        name: MemoryProvider(synthetic_offers(name, n, rng), delay_s)
        for name, n in zip(names, share, strict=True)
    }


def naive_plan(
    providers: dict[str, Provider], req: Requirements, validate: bool = True
) -> list[Offer]:
    """The straightforward planner this one is measured against (``validate=False``: without
    the per-offer validation, close to corral's planner before it was tuned)."""
    kept: list[Offer] = []
    for name, provider in providers.items():
        if req.providers is not None and name not in req.providers:
            continue
        for raw in provider.offers(req):
            o = Offer.model_validate(raw.model_dump()) if validate else raw
            if req.max_hourly_price is not None and o.price_per_hour > req.max_hourly_price:
                continue
            if req.regions and o.region not in req.regions:
                continue
            if req.spot is not None and o.spot != req.spot:
                continue
            if o.gpu_count < req.gpu_count_min:
                continue
            if req.gpu_count_max and o.gpu_count > req.gpu_count_max:
                continue
            if req.gpu_type and o.gpu_type and o.gpu_type.upper() != req.gpu_type.upper():
                continue
            if req.cpus is not None and o.cpus is not None and o.cpus < req.cpus:
                continue
            if (
                req.memory_gb is not None
                and o.memory_gb is not None
                and o.memory_gb < req.memory_gb
            ):
                continue
            kept.append(o)
    return sorted(
        kept,
        key=lambda o: (not o.available, o.price_per_hour, o.provider, o.region, o.offer_id),
    )


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _keys(offers: list[Offer]) -> list[tuple[str, str]]:
    return [(o.provider, o.offer_id) for o in offers]


def run(total: int, count: int, repeat: int) -> dict[str, Any]:
    providers = build(total, count)
    everything = Requirements()
    plan_s, result = median_time(lambda: planner.plan(providers, TYPICAL), repeat)
    base_s, baseline = median_time(lambda: naive_plan(providers, TYPICAL), max(3, repeat // 4))
    if _keys(result.offers) != _keys(baseline):
        raise SystemExit("planner and baseline disagree on the offers or their order")
    simple_s, simple = median_time(lambda: naive_plan(providers, TYPICAL, False), repeat)
    if _keys(simple) != _keys(baseline):
        raise SystemExit("the baselines disagree")
    all_s, result_all = median_time(lambda: planner.plan(providers, everything), repeat)
    base_all_s, baseline_all = median_time(
        lambda: naive_plan(providers, everything), max(3, repeat // 4)
    )
    if _keys(result_all.offers) != _keys(baseline_all):
        raise SystemExit("planner and baseline disagree on the unfiltered order")
    slow = build(total, count, delay_s=0.05)
    lat_repeat = max(3, repeat // 4)
    par_s, _ = median_time(lambda: planner.plan(slow, TYPICAL), lat_repeat)
    ser_s, _ = median_time(lambda: planner.plan(slow, TYPICAL, workers=1), lat_repeat)
    return {
        "offers": total,
        "providers": count,
        "kept": len(result.offers),
        "cheapest": None if result.cheapest is None else result.cheapest.offer_id,
        "plan_10k_s": round(plan_s, 5),
        "baseline_10k_s": round(base_s, 5),
        "speedup": round(base_s / plan_s, 1),
        "simple_10k_s": round(simple_s, 5),
        "plan_all_10k_s": round(all_s, 5),
        "baseline_all_10k_s": round(base_all_s, 5),
        "plan_5x50ms_s": round(par_s, 4),
        "serial_5x50ms_s": round(ser_s, 4),
        "target_s": TARGET_S,
        "met": plan_s < TARGET_S,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--offers", type=int, default=10_000, help="offers in all (default 10000)")
    parser.add_argument("--providers", type=int, default=5, help="providers (default 5)")
    parser.add_argument("--repeat", type=int, default=21, help="runs per figure (median)")
    args = parser.parse_args(argv)
    if args.offers < 1 or args.providers < 1 or args.repeat < 1:
        parser.error("--offers, --providers and --repeat must be at least 1")
    r = run(args.offers, args.providers, args.repeat)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    n = f"{r['offers']:,} offers, {r['providers']} providers"
    print(f"planner: {n} ({r['kept']} fit the typical request; cheapest {r['cheapest']})")
    rows = [
        ("plan(), typical request", r["plan_10k_s"], r["baseline_10k_s"]),
        ("  vs no per-offer validation", r["plan_10k_s"], r["simple_10k_s"]),
        ("plan(), no limits", r["plan_all_10k_s"], r["baseline_all_10k_s"]),
        ("plan(), providers answer in 50 ms", r["plan_5x50ms_s"], r["serial_5x50ms_s"]),
    ]
    print(f"{'':36}{'corral':>10}{'baseline':>10}")
    for label, ours, base in rows:
        print(f"{label:36}{ours * 1000:>8.1f}ms{base * 1000:>8.1f}ms")
    print("baselines: naive planner (validation per offer, Python sort key); serial provider calls")
    verdict = "met" if r["met"] else "MISSED"
    print(f"target plan_10k_s < {TARGET_S * 1000:.0f} ms: {verdict} (speedup x{r['speedup']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
