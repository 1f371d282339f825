"""``GET /gpus``: what each GPU of the attempt reads (a declared inventory file stands in for
NVML), the running stage that holds it and how long it has sat at zero utilisation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from corral.agent import api as agent_api

from .helpers import make_plan


def declare(path: Path, *gpus: dict) -> str:
    path.write_text(json.dumps({"gpus": list(gpus)}))
    return str(path)


def test_gpus_report_readings_holders_and_time_at_zero_utilisation(
    tmp_path, start_agent, monkeypatch
):
    monkeypatch.setattr(agent_api, "GPU_USAGE_TTL", 0.0)
    inventory = tmp_path / "gpus.json"
    hot = {"name": "H100", "memory_total_mb": 81559, "memory_used_mb": 80000, "utilization_pct": 0}
    hot |= {"temperature_c": 91.0, "processes": 1, "ecc_uncorrected": 2, "ecc_corrected": 7}
    spare = {"name": "H100", "memory_total_mb": 81559, "temperature_c": 35.0}
    monkeypatch.setenv("CORRAL_FAKE_GPUS", declare(inventory, hot, spare))
    offset = [0.0]
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30", "gpus": 1}], devices=None)
    client = start_agent(plan, clock=lambda: time.monotonic() + offset[0])
    client.wait_until(lambda s: s["stages"][0]["state"] == "running")

    first = client.get("/gpus")
    assert (first["run_id"], first["attempt"], first["running_stages"]) == ("run-1", 1, ["train"])
    held, free = first["gpus"]
    assert held["id"] == "0" and held["stage"] == "train" and held["zero_util_s"] == 0.0
    assert (held["temperature_c"], held["processes"], held["ecc_uncorrected"]) == (91.0, 1, 2)
    assert (held["memory_used_mb"], held["memory_total_mb"], held["name"]) == (80000, 81559, "H100")
    assert free["stage"] is None and free["zero_util_s"] is None and free["ecc_uncorrected"] is None

    offset[0] += 600
    assert client.get("/gpus")["gpus"][0]["zero_util_s"] == pytest.approx(600, abs=5)

    declare(inventory, hot | {"utilization_pct": 97}, spare)  # the stage got to work
    assert client.get("/gpus")["gpus"][0]["zero_util_s"] is None


def test_gpus_without_any_gpu_is_an_empty_list(tmp_path, start_agent):
    client = start_agent(make_plan(tmp_path, [{"name": "t", "run": "true"}]))
    report = client.get("/gpus")
    assert report["gpus"] == [] and report["wire_version"]
    assert client.request("POST", "/gpus")[0] == 405
    assert client.request("GET", "/gpus", token="wrong")[0] == 401
