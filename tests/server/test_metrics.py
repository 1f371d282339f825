"""``GET /metrics`` against a real uvicorn, parsed with prometheus-client's own parser: runs
and cost by state and per run, webhook deliveries and failures, the controller's loop (the
file a real controller publishes), per-GPU readings of a declared inventory, and queue
lengths only while a provider with queues is enabled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.server.app import create_app
from corral.service.tokens import create_token
from corral.store import Store
from server.conftest import Api, serve
from server.test_api import follow, submit


def scrape(api: Api) -> dict[str, list[tuple[dict[str, str], float]]]:
    """sample name -> [(labels, value)]."""
    res = httpx.get(
        f"{api.url}/metrics", headers={"Authorization": f"Bearer {api.read_only_token}"}
    )
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/plain")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(res.text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def one(
    samples: dict[str, list[tuple[dict[str, str], float]]], metric: str, **labels: str
) -> float:
    [value] = [v for lab, v in samples[metric] if all(lab.get(k) == x for k, x in labels.items())]
    return value


@pytest.fixture
def metrics_api(
    corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Api]:
    gpus = [
        {
            "name": "H100",
            "memory_total_mb": 81559,
            "memory_used_mb": 2048,
            "utilization_pct": 55,
            "temperature_c": 66,
        }
    ]
    (tmp_path / "gpus.json").write_text(json.dumps(gpus))
    monkeypatch.setenv("CORRAL_FAKE_GPUS", str(tmp_path / "gpus.json"))
    monkeypatch.setenv("CORRAL_LOCAL_PRICE_PER_HOUR", "3600")  # a dollar a second
    # at $3,600 an hour the default $10 cap of a paid run would stop it within its stop's
    # reserve (tests/service/test_paid_defaults.py): this run has none
    monkeypatch.setenv("CORRAL_DEFAULT_MAX_COST_USD", "none")
    writer = create_token("w").token
    reader = create_token("r", read_only=True).token
    for url in serve(create_app()):
        yield Api(url=url, token=writer, read_only_token=reader)


def test_metrics_show_runs_cost_webhooks_the_controller_and_gpus(
    metrics_api: Api, tmp_path: Path
) -> None:
    empty = scrape(metrics_api)
    assert one(empty, "corral_runs", state="SUCCEEDED") == 0
    assert one(empty, "corral_cost_usd_total") == 0
    # no provider with queues: no such metric
    assert "corral_queue_length" not in empty and "corral_queue_readable" not in empty

    with metrics_api.client(metrics_api.token) as c:
        run = submit(c, 'name: paid\nrun: "sleep 1"\n', tmp_path)
        assert follow(c, run["id"])[-1][1]["state"] == "SUCCEEDED"
        cost = c.get(f"/api/v1/runs/{run['id']}").json()["cost_usd"]
    assert cost > 0.5
    store = Store.open()
    try:
        store.advance_webhook_cursor(run["id"], 0, 1, delivered=3, failed=1)
    finally:
        store.close()

    got = scrape(metrics_api)
    assert one(got, "corral_runs", state="SUCCEEDED") == 1
    assert one(got, "corral_runs", state="RUNNING") == 0
    assert one(got, "corral_run_cost_usd", run_id=run["id"], name="paid", state="SUCCEEDED") == (
        pytest.approx(cost)
    )
    assert one(got, "corral_cost_usd_total") == pytest.approx(cost)
    assert one(got, "corral_runs_cost_usd", state="SUCCEEDED") == pytest.approx(cost)
    assert one(got, "corral_webhook_deliveries_total") == 3
    assert one(got, "corral_webhook_failures_total") == 1
    assert one(got, "corral_controller_up") == 1
    assert one(got, "corral_controller_tick_seconds_count") >= 1
    assert one(got, "corral_controller_tick_seconds_bucket", le="+Inf") == one(
        got, "corral_controller_tick_seconds_count"
    )
    assert one(got, "corral_gpu_utilization_pct", gpu="0", model="H100", run_id="") == 55
    assert one(got, "corral_gpu_memory_used_mb", gpu="0") == 2048
    assert one(got, "corral_gpu_memory_total_mb", gpu="0") == 81559
    assert one(got, "corral_gpu_temperature_c", gpu="0") == 66
    assert one(got, "corral_gpu_health_issues", run_id="") == 0

    assert httpx.get(f"{metrics_api.url}/metrics").status_code == 401


def test_queue_lengths_appear_while_a_provider_with_queues_is_enabled(
    corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue_file = tmp_path / "queues.json"
    queue_file.write_text(json.dumps({"gpu-a100": 4, "default": 0}))
    monkeypatch.setenv("CORRAL_TEST_QUEUE_FILE", str(queue_file))
    monkeypatch.setenv("CORRAL_PROVIDER_PLUGINS", "queued=server.queue_plugin:QueuedLocal")
    monkeypatch.setenv("CORRAL_PROVIDERS", "local,queued")
    token = create_token("r", read_only=True).token
    for url in serve(create_app()):
        api = Api(url=url, token=token, read_only_token=token)
        got = scrape(api)
        assert sorted((lab["queue"], v) for lab, v in got["corral_queue_length"]) == [
            ("default", 0),
            ("gpu-a100", 4),
        ]
        assert {lab["provider"] for lab, _ in got["corral_queue_length"]} == {"queued"}
        queue_file.write_text("{broken")  # a broker that cannot be read: the scrape still works
        assert one(got, "corral_queue_readable", provider="queued") == 1
        broken = scrape(api)
        assert one(broken, "corral_queue_readable", provider="queued") == 0
        assert (
            "corral_queue_length" not in broken and one(broken, "corral_runs", state="PENDING") == 0
        )
