"""``benchmarks/planner.py`` runs, agrees with its baseline and reports ``plan_10k_s``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "planner.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("planner_benchmark", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_prints_plan_10k_s_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark()
    assert bench.main(["--json", "--offers", "600", "--providers", "5", "--repeat", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["offers"], data["providers"]) == (600, 5)
    assert data["plan_10k_s"] > 0 and data["baseline_10k_s"] > 0
    assert data["kept"] > 0 and data["cheapest"].endswith(":spot")
    # five 50 ms answers asked at once take about one answer, not five
    assert data["plan_5x50ms_s"] < data["serial_5x50ms_s"]


def test_synthetic_offers_spread_over_five_providers() -> None:
    bench = load_benchmark()
    providers = bench.build(10_000, 5)
    counts = [len(p.offers(bench.TYPICAL)) for p in providers.values()]
    assert counts == [2000] * 5
    offers = [o for p in providers.values() for o in p.offers(bench.TYPICAL)]
    assert {o.spot for o in offers} == {True, False}
    assert 0.7 < sum(o.available for o in offers) / len(offers) < 0.9
