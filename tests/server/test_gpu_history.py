"""``GET /api/v1/monitoring/gpu/history`` against a real uvicorn, from readings in the store as
the controller's sampler writes them: every GPU's points over a window, a GPU or a machine
picked out, a long window downsampled to ``points``, bad windows refused with one line; and
the GPU page's chart of them."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from corral.store import Store
from corral.store.gpu_history import GpuReading
from server.conftest import Api

HOST = "box-1"


def _host(g: int, i: int) -> GpuReading:
    return GpuReading(
        kind="host", source=HOST, attempt=0, gpu=g, uuid=f"GPU-{g}aa", name="H100",
        memory_total_mb=81559, util_pct=(i + 50 * g) % 100, mem_used_mb=1024 * (g + 1),
        temp_c=40 + g,
    )  # fmt: skip


def _node(run_id: str) -> GpuReading:
    return GpuReading(
        kind="node", source=run_id, attempt=1, gpu=0, util_pct=97, mem_used_mb=40000,
        memory_total_mb=46068,
    )  # fmt: skip


def seed(hours: float = 2.0) -> tuple[str, datetime]:
    """Two GPUs of this machine and one of a run's node, one reading a minute for ``hours``
    up to now; the run's id and the last reading's time."""
    store = Store.open()
    try:
        run = store.create_run(
            name="train", spec={}, spec_hash="h", spec_path="/s.yaml", workdir="/tmp"
        )
        store.create_attempt(
            run.id, 1, provider="local", offer={"gpu_type": "L40S"}, price_per_hour=0.0
        )
        now = datetime.now(UTC).replace(microsecond=0)
        n = int(hours * 60)
        for i in range(n):
            at = now - timedelta(minutes=n - 1 - i)
            readings = [_host(g, i) for g in (0, 1)]
            if i >= n - 30:  # the run's node: the last half hour
                readings.append(_node(run.id))
            store.record_gpu_readings(readings, at=at, every_s=60)
        return run.id, now
    finally:
        store.close()


def test_the_history_of_every_gpu_over_a_window(api: Api) -> None:
    run_id, now = seed()
    with api.client(api.read_only_token) as c:
        got = c.get("/api/v1/monitoring/gpu/history", params={"since": "1h"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["step_s"] == math.ceil(3601 / 300)  # 13 s: every reading shows
        by = {(s["kind"], s["index"]): s for s in body["series"]}
        assert sorted(by) == [("host", 0), ("host", 1), ("node", 0)]
        host = by[("host", 1)]
        assert (host["machine"], host["uuid"], host["name"], host["run_id"]) == (
            HOST,
            "GPU-1aa",
            "H100",
            None,
        )
        assert 60 <= len(host["utilization_pct"]) <= 61  # one a minute over the hour
        assert host["memory_used_mb"][-1] == [now.timestamp(), 2048.0]
        assert host["temperature_c"][-1] == [now.timestamp(), 41.0]
        times = [p[0] for p in host["utilization_pct"]]
        assert times == sorted(times) and times[0] >= now.timestamp() - 3600
        node = by[("node", 0)]
        assert node["machine"] == "train (attempt 1)" and node["run_id"] == run_id
        assert (node["run_name"], node["attempt"], node["name"]) == ("train", 1, "L40S")
        assert len(node["utilization_pct"]) == 30 and node["temperature_c"] == []
        assert node["utilization_pct"][0][1] == 97.0

        # one GPU (by index or uuid), one machine (a host, or a run's node by id or name)
        picked = c.get("/api/v1/monitoring/gpu/history", params={"gpu": "GPU-1aa"}).json()
        assert [(s["machine"], s["index"]) for s in picked["series"]] == [(HOST, 1)]
        zeros = c.get("/api/v1/monitoring/gpu/history", params={"gpu": "0"}).json()["series"]
        assert sorted(s["kind"] for s in zeros) == ["host", "node"]
        for machine in ("train", run_id):
            only = c.get("/api/v1/monitoring/gpu/history", params={"machine": machine}).json()
            assert [s["kind"] for s in only["series"]] == ["node"]

        # a long window: at most `points` points per GPU, each the mean of its span
        thin = c.get("/api/v1/monitoring/gpu/history", params={"since": "3h", "points": 10})
        series = thin.json()["series"]
        assert all(len(s["utilization_pct"]) <= 10 for s in series)
        assert 6 <= len(series[0]["utilization_pct"]) <= 8  # 2 h of readings in 18 min spans
        assert thin.json()["step_s"] == math.ceil((3 * 3600 + 1) / 10)
        # a window in the past (unix seconds, or durations) holds nothing; nor one backwards
        old = f"@{int((now - timedelta(days=3)).timestamp())}"
        past = c.get("/api/v1/monitoring/gpu/history", params={"since": old, "until": "2d"})
        assert past.status_code == 200 and past.json()["series"] == []
        assert past.json()["since"] == int(old[1:])
        backwards = c.get("/api/v1/monitoring/gpu/history", params={"since": "1h", "until": "2h"})
        assert backwards.status_code == 200 and backwards.json()["series"] == []
        # the last 20 minutes, given as unix seconds
        since = f"@{int(now.timestamp()) - 1200}"
        recent = c.get("/api/v1/monitoring/gpu/history", params={"since": since, "gpu": "1"})
        assert len(recent.json()["series"][0]["utilization_pct"]) == 21


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"since": "soon"}, "'soon': expected a duration before now (90s, 30m, 6h, 7d, 2w"),
        ({"since": "-1h"}, "'-1h': expected a duration before now"),
        ({"until": "2026-01-01"}, "'2026-01-01': expected a duration before now"),
        ({"points": 5}, "points"),
        ({"machine": ["a", "b"]}, "machine is given more than once"),
    ],
)
def test_a_bad_window_is_one_line_saying_what_is_expected(
    api: Api, params: dict, says: str
) -> None:
    with api.client(api.read_only_token) as c:
        got = c.get("/api/v1/monitoring/gpu/history", params=params)
    assert got.status_code == 422, got.text
    assert says in got.json()["message"] and "\n" not in got.json()["message"]


def test_the_gpu_page_holds_the_charts(api: Api) -> None:
    seed(0.2)
    with httpx.Client(base_url=api.url, cookies={"corral_token": api.read_only_token}) as page:
        html = page.get("/gpus").text
        assert 'id="gpu-history" data-since="6h"' in html
        assert 'id="chart-gpu-util"' in html and 'id="chart-gpu-mem"' in html
        assert all(f'data-window="{w}"' in html for w in ("1h", "6h", "24h", "7d"))
        assert '<script src="/static/chart.js"></script>' in html
        js = page.get("/static/dashboard.js").text
        assert "/api/v1/monitoring/gpu/history?since=" in js
    assert httpx.get(f"{api.url}/api/v1/monitoring/gpu/history").status_code == 401


def test_moments_past_either_end_are_taken_as_the_ends() -> None:
    from corral.service.gpu_history import parse_when

    now = datetime(2026, 3, 1, tzinfo=UTC)
    assert parse_when("0", now, "since") == now
    assert parse_when("1.5h", now, "since") == now - timedelta(minutes=90)
    assert parse_when("2w", now, "since") == now - timedelta(days=14)
    assert parse_when("999999999w", now, "since") == datetime(1970, 1, 1, tzinfo=UTC)
    assert parse_when("@999999999999", now, "until").year == 9999
