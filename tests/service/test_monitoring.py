"""GPU health: thresholds parsed and named when wrong, verdicts at their boundaries, and a
running run whose agent does not answer reported as an issue of its own."""

from __future__ import annotations

import socket

import pytest

from corral.errors import BadInput
from corral.service import monitoring
from corral.service.gpu_health import GpuThresholds, judge, parse_thresholds
from corral.store import Store


def gpu(**kw: object) -> dict[str, object]:
    return {"id": "0", "name": "A100", "memory_used_mb": 0, "memory_total_mb": 0} | kw


def test_thresholds_parse_and_unnamed_keys_keep_their_defaults() -> None:
    t = parse_thresholds(" temperature_warn_c=80 , ecc_uncorrected_max=2,")
    assert (t.temperature_warn_c, t.ecc_uncorrected_max) == (80.0, 2)
    assert t.temperature_critical_c == GpuThresholds().temperature_critical_c == 95.0
    assert parse_thresholds("") == GpuThresholds()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("temperature_warn_c", "expected KEY=VALUE, got 'temperature_warn_c'"),
        ("=3", "expected KEY=VALUE"),
        ("memory_warn_pct=150", "memory_warn_pct: Input should be less than or equal to 100"),
        ("temperature_warn_c=hot", "temperature_warn_c: Input should be a valid number"),
        ("nvlink=1", "nvlink: Extra inputs are not permitted (known: temperature_warn_c, "),
    ],
)
def test_bad_thresholds_name_the_key(text: str, message: str) -> None:
    with pytest.raises(BadInput) as err:
        parse_thresholds(text)
    assert str(err.value).startswith("CORRAL_GPU_THRESHOLDS: ")
    assert message in str(err.value)


def test_verdicts_at_the_thresholds() -> None:
    t = GpuThresholds()
    assert judge([gpu(temperature_c=84.9), gpu(temperature_c=None)], t).status == "healthy"
    assert judge([gpu(temperature_c=85)], t).warnings == [
        "GPU 0 (A100) is at 85 °C (warning at 85)"
    ]
    assert judge([gpu(temperature_c=95)], t).issues == ["GPU 0 (A100) is at 95 °C (critical at 95)"]
    full = judge([gpu(memory_used_mb=95, memory_total_mb=100)], t)
    assert full.status == "warning" and "95% full" in full.warnings[0]
    assert judge([gpu(memory_used_mb=94, memory_total_mb=100)], t).healthy
    assert judge([gpu(ecc_uncorrected=0, ecc_corrected=50)], t).healthy
    assert judge([gpu(ecc_uncorrected=1)], t).status == "unhealthy"
    # stuck at zero counts only under a running stage, and only from the threshold on
    assert judge([gpu(zero_util_s=400.0, stage=None)], t).healthy
    assert judge([gpu(zero_util_s=299.0, stage="train")], t).healthy
    stuck = judge([gpu(zero_util_s=300.0, stage="train")], t, where="n1")
    assert stuck.warnings == [
        "n1: GPU 0 (A100) has read 0% utilisation for 300 s while stage 'train' runs "
        "(warning after 300 s)"
    ]


def test_a_running_run_whose_agent_does_not_answer_is_an_issue(corral_home) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = Store.open()
    try:
        run = store.create_run(name="lost", spec={}, spec_hash="x", spec_path="x", workdir="/")
        store.create_attempt(run.id, 1, provider="local", offer={}, price_per_hour=0.0)
        store.update_attempt(run.id, 1, endpoint=f"http://127.0.0.1:{port}")
        store.transition(run.id, "RUNNING", "test", attempt=1)
        report = monitoring.gpu_report(store=store, environ={}, timeout=1.0)
    finally:
        store.close()
    [node] = report.nodes
    assert (node.run_id, node.gpus, node.health.status) == (run.id, [], "unhealthy")
    assert node.error and "unreachable" in node.error
    assert report.health.issues == [f"lost (attempt 1): GPUs not readable: {node.error}"]
