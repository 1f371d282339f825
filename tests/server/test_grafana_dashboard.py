"""corral's Grafana dashboard (deploy/grafana/dashboards/corral.json) against a real Prometheus:
a real server on loopback over a store with runs in several states (a preempted and recovered
one among them, with cost), a pool-like queue and declared GPUs; Debian's ``prometheus`` scrapes
it every second with the stack's own scrape config (deploy/prometheus/prometheus.yml, token
and all), and every query of every panel must answer with at least one series. The dashboard's
form is checked without Prometheus: one datasource, the provisioned one; unique panel ids;
panels on the grid without overlaps."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from corral.server.app import create_app
from corral.service.tokens import create_token
from corral.store import RunState, Store
from server.conftest import Api, free_port, serve
from server.test_metrics import one, scrape
from support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "corral.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
#: what Grafana puts in place of its own variables, for a 1 s scrape interval
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
GPUS = [
    {"name": "H100", "memory_total_mb": 81559, "memory_used_mb": 2048, "utilization_pct": 55},
    {"name": "H100", "memory_total_mb": 81559, "memory_used_mb": 40960, "utilization_pct": 97},
]


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def test_the_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    [source] = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert source["type"] == "prometheus" and dashboard["uid"] and dashboard["schemaVersion"] >= 39
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    taken: set[tuple[int, int]] = set()
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": source["uid"]}, p["title"]
        assert p["targets"] and p["title"] and p["description"], p["id"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip(), p["title"]
        pos = p["gridPos"]
        assert all(isinstance(pos[k], int) and pos[k] >= 0 for k in "xywh"), p["title"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] + pos["w"] <= 24, p["title"]
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
    for var in dashboard["templating"]["list"]:
        assert var["datasource"]["uid"] == source["uid"], var["name"]
    # every variable a query uses is a dashboard variable or one of Grafana's own
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    for title, expr in _targets(dashboard):
        used = set(re.findall(r"\$(\w+)", expr)) - {"__rate_interval", "__interval", "__range"}
        assert used <= defined, (title, used - defined)


def _seed(store: Store) -> None:
    """Runs in several states: one recovered after a preemption and running (2 attempts, $1
    so far), one succeeded ($3), one failed, two pending."""
    now = datetime.now(UTC)

    def run(name: str) -> str:
        return store.create_run(
            name=name, spec={"name": name}, spec_hash="0", spec_path="corral.yaml", workdir="."
        ).id

    def attempt(run_id: str, number: int, *, hours: float, **fields: Any) -> None:
        start = now - timedelta(hours=hours)
        store.transition(run_id, RunState.PROVISIONING, "launching", attempt=number)
        store.create_attempt(
            run_id, number, provider="local", offer={}, price_per_hour=1.0, started_at=start
        )
        store.update_attempt(run_id, number, billed_until=now, **fields)
        store.transition(run_id, RunState.RUNNING, "running")

    recovered = run("recovered")
    attempt(recovered, 1, hours=0.5, exit_reason="preempted")
    store.transition(recovered, RunState.RECOVERING, "preempted: restart 1 of 3")
    attempt(recovered, 2, hours=0.5)
    done = run("done")
    attempt(done, 1, hours=3, exit_reason="succeeded")
    store.transition(done, RunState.SUCCEEDED, "done")
    failed = run("failed")
    attempt(failed, 1, hours=0, exit_reason="failed")
    store.transition(failed, RunState.FAILED, "exit 1")
    run("waiting-1")
    run("waiting-2")


@dataclass
class Corral:
    api: Api
    recovered_run: str


@pytest.fixture
def corral(corral_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Corral]:
    (tmp_path / "gpus.json").write_text(json.dumps(GPUS))
    monkeypatch.setenv("CORRAL_FAKE_GPUS", str(tmp_path / "gpus.json"))
    (tmp_path / "queues.json").write_text(json.dumps({"l40s.x1": 4, "h100.x8": 0}))
    monkeypatch.setenv("CORRAL_TEST_QUEUE_FILE", str(tmp_path / "queues.json"))
    monkeypatch.setenv("CORRAL_PROVIDER_PLUGINS", "queued=server.queue_plugin:QueuedLocal")
    monkeypatch.setenv("CORRAL_PROVIDERS", "local,queued")
    store = Store.open()
    try:
        _seed(store)
        [recovered] = [r for r in store.list_runs() if r.name == "recovered"]
    finally:
        store.close()
    token = create_token("prometheus", read_only=True).token
    for url in serve(create_app()):
        yield Corral(Api(url=url, token=token, read_only_token=token), recovered.id)


def test_metrics_count_preemptions_and_recoveries(corral: Corral) -> None:
    got = scrape(corral.api)
    assert one(got, "corral_preemptions_total") == 1
    assert one(got, "corral_recoveries_total") == 1
    assert one(got, "corral_runs", state="RUNNING") == 1
    assert one(got, "corral_cost_usd_total") == pytest.approx(4.0, abs=0.01)


class Prometheus:
    """Debian's ``prometheus`` on a free loopback port, scraping with ``config``."""

    def __init__(self, binary: str, config: dict[str, Any], workdir: Path):
        workdir.mkdir()
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "prometheus.log").open("wb"),
        )
        self.log = workdir / "prometheus.log"

    def query(self, expr: str) -> list[dict[str, Any]]:
        res = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = res.json()
        assert res.status_code == 200 and body["status"] == "success", (expr, body)
        return list(body["data"]["result"])

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def scrapes(self) -> int:
        """How many scrapes of corral succeeded in the last minute."""
        got = self.query('sum_over_time(up{job="corral"}[1m])')
        return int(float(got[0]["value"][1])) if got else 0

    def target_state(self) -> str:
        """The scrape target's health and last error, for a failure's message."""
        body = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()
        return "; ".join(
            f"{t['scrapeUrl']}: {t['health']} {t['lastError']}"
            for t in body["data"]["activeTargets"]
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def prometheus(corral: Corral, tmp_path: Path) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip(
            "prometheus is not installed: apt-get install prometheus (scripts/test.sh does)"
        )
    # the stack's own scrape config, pointed at this server every second
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    [job] = config["scrape_configs"]
    token_file = tmp_path / "corral-metrics-token"
    token_file.write_text(corral.api.read_only_token)
    job["authorization"]["credentials_file"] = str(token_file)
    job["static_configs"] = [{"targets": [corral.api.url.removeprefix("http://")]}]
    prom = Prometheus(binary, config, tmp_path / "prometheus")
    try:
        wait_until(prom.ready, 20, interval=0.2, message="prometheus to be ready")
        yield prom
    finally:
        prom.stop()


def test_every_panel_query_answers_from_a_real_prometheus(
    corral: Corral, prometheus: Prometheus
) -> None:
    wait_until(
        lambda: prometheus.scrapes() >= 1,
        20,
        interval=0.3,
        message=lambda: f"a scrape of corral ({prometheus.target_state()})",
    )
    # the recovered run goes on costing: $1 more, which the next scrapes see
    store = Store.open()
    try:
        store.update_attempt(
            corral.recovered_run, 2, billed_until=datetime.now(UTC) + timedelta(hours=1)
        )
    finally:
        store.close()
    seen = prometheus.scrapes()
    wait_until(lambda: prometheus.scrapes() >= seen + 2, 20, interval=0.3, message="2 scrapes")

    dashboard = _dashboard()
    values = {}
    for var in dashboard["templating"]["list"]:
        # the variable's own query lists values, and the dashboard opens on "All"
        found = re.fullmatch(r"label_values\((\w+), *(\w+)\)", var["definition"])
        assert found, var["definition"]
        metric, label = found.groups()
        listed = {s["metric"][label] for s in prometheus.query(metric)}
        assert listed, var["name"]
        values[f"${var['name']}"] = var["allValue"]
    answers = {}
    for title, expr in _targets(dashboard):
        concrete = expr
        for name, sub in sorted({**GRAFANA_VARS, **values}.items(), key=lambda kv: -len(kv[0])):
            concrete = concrete.replace(name, sub)
        assert "$" not in concrete, (title, concrete)
        result = prometheus.query(concrete)
        assert result, f"panel {title!r}: {concrete} answers no series"
        answers[expr] = result

    def value(expr: str) -> float:
        [series] = answers[expr]
        return float(series["value"][1])

    assert value("sum(corral_queue_length)") == 4
    assert value('sum(corral_runs{state=~"PENDING|PROVISIONING|RUNNING|RECOVERING|STOPPING"})') == 3
    assert value("corral_cost_usd_total") == pytest.approx(5.0, abs=0.01)
    assert value("sum(rate(corral_cost_usd_total[$__rate_interval])) * 3600") > 0
    assert len(answers['corral_gpu_utilization_pct{machine=~"$machine"}']) == len(GPUS)
    assert prometheus.query("corral_preemptions_total")[0]["value"][1] == "1"
    assert prometheus.query("corral_recoveries_total")[0]["value"][1] == "1"
