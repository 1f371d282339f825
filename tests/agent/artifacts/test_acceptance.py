"""Acceptance criteria checked against the evaluation report."""

from __future__ import annotations

import json
from pathlib import Path

from corral.agent.acceptance import evaluate, rejection
from corral.wire.plan import AcceptancePlan


def _criteria(*items: tuple[str, str, float]) -> list[AcceptancePlan]:
    return [AcceptancePlan(metric=m, op=op, value=v) for m, op, v in items]


def _write(work: Path, text: str, name: str = "eval/report.json") -> str:
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    (work / name).write_text(text)
    return name


def test_each_criterion_gets_its_observed_value_and_pass_fail(tmp_path):
    report = _write(tmp_path, json.dumps({"cer_clean": 0.021, "cer_degraded": 0.12, "n": 5}))
    result = evaluate(
        tmp_path,
        report,
        _criteria(("cer_clean", "<=", 0.03), ("cer_degraded", "<=", 0.10), ("n", "==", 5)),
    )
    rows = [(r["metric"], r["observed"], r["passed"]) for r in result["criteria"]]
    assert rows == [("cer_clean", 0.021, True), ("cer_degraded", 0.12, False), ("n", 5, True)]
    assert result["status"] == "ok" and result["error"] is None
    assert result["all_pass"] is False
    assert rejection(result) == "acceptance failed: cer_degraded = 0.12 (needs <= 0.1)"


def test_every_operator_compares_the_observed_value_with_the_threshold(tmp_path):
    report = _write(tmp_path, json.dumps({"x": 2.0}))
    cases = {
        ("<", 3): True,
        ("<", 2): False,
        (">", 1): True,
        (">", 2): False,
        (">=", 2): True,
        ("<=", 1.5): False,
        ("==", 2): True,
        ("==", 2.5): False,
    }
    for (op, value), expected in cases.items():
        result = evaluate(tmp_path, report, _criteria(("x", op, value)))
        assert result["criteria"][0]["passed"] is expected, (op, value)
        assert result["all_pass"] is expected


def test_a_missing_metric_fails_with_a_note_and_nested_metrics_are_found(tmp_path):
    data = {"clean": {"cer": 0.01}, "metrics": {"latency_p95_ms": 150}, "ok": True, "s": "0.1"}
    report = _write(tmp_path, json.dumps(data))
    result = evaluate(
        tmp_path,
        report,
        _criteria(
            ("clean.cer", "<=", 0.03),
            ("latency_p95_ms", "<=", 200),
            ("wer", "<=", 0.1),
            ("ok", "==", 1),
            ("s", "<=", 1),
        ),
    )
    by_metric = {r["metric"]: r for r in result["criteria"]}
    assert by_metric["clean.cer"]["passed"] and by_metric["latency_p95_ms"]["observed"] == 150
    assert by_metric["wer"] == {
        "metric": "wer",
        "op": "<=",
        "value": 0.1,
        "observed": None,
        "passed": False,
        "note": "metric 'wer' is not in the report",
    }
    assert "not a number" in by_metric["ok"]["note"] and not by_metric["ok"]["passed"]
    assert "not a number" in by_metric["s"]["note"]
    assert "metric 'wer' is not in the report" in rejection(result)


def test_a_non_finite_value_fails_and_is_not_echoed_as_invalid_json(tmp_path):
    report = _write(tmp_path, '{"loss": NaN}')
    result = evaluate(tmp_path, report, _criteria(("loss", "<=", 1)))
    row = result["criteria"][0]
    assert row["observed"] is None and not row["passed"] and "not a finite number" in row["note"]
    json.dumps(result, allow_nan=False)


def test_a_missing_or_invalid_report_is_reported_clearly(tmp_path):
    crit = _criteria(("cer", "<=", 0.1))
    missing = evaluate(tmp_path, "eval/none.json", crit)
    assert missing["status"] == "missing" and missing["all_pass"] is False
    assert missing["error"] == "eval report eval/none.json was not written"
    assert missing["criteria"][0]["note"] == missing["error"]
    assert rejection(missing) == "acceptance failed: eval report eval/none.json was not written"
    bad = evaluate(tmp_path, _write(tmp_path, "{not json", "bad.json"), crit)
    assert bad["status"] == "invalid" and "is not valid JSON" in bad["error"]
    listed = evaluate(tmp_path, _write(tmp_path, "[1, 2]", "list.json"), crit)
    assert listed["status"] == "invalid" and "must be a JSON object, not list" in listed["error"]
    (tmp_path / "adir").mkdir()
    assert evaluate(tmp_path, "adir", crit)["status"] == "invalid"


def test_a_report_outside_the_workdir_is_not_read(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    _write(tmp_path, json.dumps({"cer": 0.0}), "outside.json")
    (work / "link.json").symlink_to(tmp_path / "outside.json")
    for name in ("../outside.json", "link.json"):
        result = evaluate(work, name, _criteria(("cer", "<=", 0.1)))
        assert result["status"] == "invalid" and "outside the workdir" in result["error"]


def test_no_criteria_pass_when_the_report_is_readable(tmp_path):
    assert evaluate(tmp_path, _write(tmp_path, "{}"), [])["all_pass"] is True
    assert evaluate(tmp_path, "nope.json", [])["all_pass"] is False
