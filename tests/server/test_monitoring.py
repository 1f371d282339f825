"""``GET /api/v1/monitoring/gpu`` against a real uvicorn: this machine's GPUs and a running
run's node (its agent's ``GET /gpus``), read from a declared inventory file that reports
temperature, memory, processes and ECC errors, with verdicts from settable thresholds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.server.app import create_app
from corral.service.gpu_health import GpuThresholds
from corral.service.tokens import create_token
from server.conftest import Api, serve
from server.test_api import submit
from support.waiting import wait_until

HOT = {
    "name": "H100",
    "memory_total_mb": 81559,
    "memory_used_mb": 80000,
    "utilization_pct": 97,
    "temperature_c": 97,
    "processes": 1,
    "ecc_uncorrected": 3,
    "ecc_corrected": 12,
}
COOL = {"name": "H100", "memory_total_mb": 81559, "memory_used_mb": 1024, "temperature_c": 41}


def declare(path: Path, *gpus: dict[str, Any]) -> str:
    path.write_text(json.dumps({"gpus": list(gpus)}))
    return str(path)


@pytest.fixture
def gpu_api(corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", declare(tmp_path / "gpus.json", COOL, HOT))
    writer = create_token("w").token
    reader = create_token("r", read_only=True).token
    thresholds = GpuThresholds(util_zero_warn_s=0)  # a held GPU at 0 % warns at once
    for url in serve(create_app(gpu_thresholds=thresholds)):
        yield Api(url=url, token=writer, read_only_token=reader)


def test_host_and_node_gpus_are_read_and_judged(gpu_api: Api, tmp_path: Path) -> None:
    with gpu_api.client(gpu_api.read_only_token) as c:
        quiet = c.get("/api/v1/monitoring/gpu").json()
        assert quiet["nodes"] == [] and quiet["host"]["kind"] == "host"
        cool, hot = quiet["host"]["gpus"]
        assert (hot["name"], hot["memory_used_mb"], hot["memory_total_mb"]) == (
            "H100",
            80000,
            81559,
        )
        assert (hot["utilization_pct"], hot["temperature_c"], hot["processes"]) == (97.0, 97.0, 1)
        # the Celery GPU-workers guide's shape, for a client written for it
        guide = quiet["gpus"][1]
        assert (guide["index"], guide["name"], guide["utilization_percent"]) == (1, "H100", 97.0)
        assert guide["memory"] == {
            "used_gb": 78.12,
            "total_gb": 79.65,
            "utilization_percent": 98.1,
        }
        assert guide["temperature_c"] == 97.0 and guide["processes"] == {"count": 1}
        assert set(quiet["health"]) >= {"healthy", "warnings", "issues"}
        assert hot["memory_used_pct"] == 98.1 and hot["ecc_uncorrected"] == 3
        assert cool["ecc_uncorrected"] is None and cool["memory_used_pct"] == 1.3
        health = quiet["host"]["health"]
        assert health["status"] == "unhealthy" and not health["healthy"]
        assert health["issues"][0] == "GPU 1 (H100) is at 97 °C (critical at 95)"
        assert any("3 uncorrected ECC" in line for line in health["issues"])
        assert any("memory is 98% full" in line for line in health["warnings"])
        assert quiet["health"] == health and quiet["thresholds"]["util_zero_warn_s"] == 0

    with gpu_api.client(gpu_api.token) as c:
        # the cool GPU, idle, held by a running stage: "stuck at zero" on the node
        spec = 'name: gpu-job\nresources: {gpus: 1}\nrun: "sleep 60"\n'
        run = submit(c, spec, tmp_path)
        wait_until(
            lambda: c.get(f"/api/v1/runs/{run['id']}").json()["state"] == "RUNNING",
            60,
            message="the run to be RUNNING",
        )
        report: dict[str, Any] = {}

        def node_seen() -> bool:
            report.update(c.get("/api/v1/monitoring/gpu").json())
            return bool(report["nodes"]) and bool(report["nodes"][0]["gpus"])

        wait_until(node_seen, 30, message="the node's GPUs in the report")
        [node] = report["nodes"]
        assert (node["kind"], node["run_id"], node["attempt"], node["error"]) == (
            "node",
            run["id"],
            1,
            None,
        )
        [held] = node["gpus"]  # the agent reports the GPU it was given, not the machine's
        assert (held["id"], held["stage"], held["temperature_c"]) == ("0", "main", 41.0)
        assert node["health"] == {
            "status": "warning",
            "healthy": False,
            "warnings": [
                f"gpu-job (attempt 1): GPU 0 (H100) has read 0% utilisation for "
                f"{held['zero_util_s']:.0f} s while stage 'main' runs (warning after 0 s)"
            ],
            "issues": [],
        }
        assert report["health"]["warnings"][-1] == node["health"]["warnings"][0]

        # the run page's GPU panel shows the same node
        browser = httpx.Client(base_url=gpu_api.url, timeout=30)
        browser.post("/login", data={"token": gpu_api.read_only_token})
        panel = browser.get(f"/ui/runs/{run['id']}").json()["parts"]["gpus"]
        assert "has read 0% utilisation" in panel and "H100" in panel and "41 °C" in panel
        page = browser.get("/gpus")
        assert page.status_code == 200 and "unhealthy" in page.text
        assert "GPU 1 (H100) is at 97 °C (critical at 95)" in page.text
        assert f'href="/runs/{run["id"]}"' in page.text  # the node's card links to its run
        assert "97 °C" in browser.get("/ui/gpus").text
        assert c.post(f"/api/v1/runs/{run['id']}/cancel").status_code == 200


def test_thresholds_can_be_set_and_bad_ones_are_named(
    corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.errors import BadInput

    monkeypatch.setenv("CORRAL_FAKE_GPUS", declare(tmp_path / "gpus.json", COOL))
    monkeypatch.setenv("CORRAL_GPU_THRESHOLDS", "temperature_warn_c=40, memory_warn_pct=1")
    token = create_token("r", read_only=True).token
    for url in serve(create_app()):
        api = Api(url=url, token=token, read_only_token=token)
        with api.client(token) as c:
            report = c.get("/api/v1/monitoring/gpu").json()
            assert report["health"]["status"] == "warning" and report["health"]["issues"] == []
            assert report["health"]["warnings"] == [
                "GPU 0 (H100) is at 41 °C (warning at 40)",
                "GPU 0 (H100) memory is 1% full (1024 of 81559 MiB; warning at 1%)",
            ]
            assert c.get("/api/v1/monitoring/gpu", headers={"Authorization": ""}).status_code == 401
    monkeypatch.setenv("CORRAL_GPU_THRESHOLDS", "temperature_warn=80")
    with pytest.raises(BadInput, match=r"CORRAL_GPU_THRESHOLDS: temperature_warn: .*known: "):
        create_app()
