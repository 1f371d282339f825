"""Read the evaluation report and check the plan's acceptance criteria against it.

The report is a JSON object that the user's eval stage writes (``eval.report``, relative to the
workdir). A criterion's metric is looked up as a top-level key, then as a dotted path into
nested objects (``clean.cer``), then inside a top-level ``"metrics"`` object. The result::

    {"report": "eval/report.json", "status": "ok", "error": null, "all_pass": false,
     "criteria": [{"metric": "cer_clean", "op": "<=", "value": 0.03, "observed": 0.021,
                   "passed": true, "note": ""},
                  {"metric": "latency_p95_ms", "op": "<=", "value": 200.0, "observed": null,
                   "passed": false, "note": "metric 'latency_p95_ms' is not in the report"}]}

``status`` is ``ok``, ``missing`` (no file), or ``invalid`` (unreadable, not JSON, not an
object, too large, outside the workdir); ``error`` says why. A metric that is missing, not a
number (booleans are not numbers) or not finite is a failed criterion with a ``note``.
``all_pass`` is true only when the report is ``ok`` and every criterion passed.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from corral.wire.plan import AcceptancePlan

MAX_REPORT_BYTES = 16 * 1024 * 1024

_OPS = {
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "==": lambda a, b: a == b,
}


def load_report(workdir: str | Path, report: str) -> tuple[dict[str, Any] | None, str, str]:
    """``(report object or None, status, error)`` for the workdir-relative ``report``."""
    work = os.path.realpath(workdir)
    path = os.path.realpath(os.path.join(work, report))
    if not path.startswith(work.rstrip(os.sep) + os.sep):
        return None, "invalid", f"eval report {report} is outside the workdir"
    try:
        size = os.path.getsize(path)
        if size > MAX_REPORT_BYTES:
            return None, "invalid", f"eval report {report} is too large ({size} bytes)"
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, "missing", f"eval report {report} was not written"
    except IsADirectoryError:
        return None, "invalid", f"eval report {report} is a directory"
    except UnicodeDecodeError:
        return None, "invalid", f"eval report {report} is not UTF-8 text"
    except ValueError as exc:
        return None, "invalid", f"eval report {report} is not valid JSON: {exc}"
    except OSError as exc:
        return None, "invalid", f"eval report {report} cannot be read: {exc.strerror or exc}"
    if not isinstance(data, dict):
        kind = type(data).__name__
        return None, "invalid", f"eval report {report} must be a JSON object, not {kind}"
    return data, "ok", ""


def lookup(report: dict[str, Any], metric: str) -> tuple[bool, Any]:
    """``(found, value)`` of ``metric`` in the report (see the module doc for the order)."""
    if metric in report:
        return True, report[metric]
    node: Any = report
    for part in metric.split("."):
        if not isinstance(node, dict) or part not in node:
            break
        node = node[part]
    else:
        return True, node
    inner = report.get("metrics")
    if isinstance(inner, dict) and inner is not report:
        return lookup(inner, metric)
    return False, None


def check(criterion: AcceptancePlan, report: dict[str, Any] | None, error: str) -> dict:
    row: dict[str, Any] = {
        "metric": criterion.metric,
        "op": criterion.op,
        "value": criterion.value,
        "observed": None,
        "passed": False,
        "note": "",
    }
    if report is None:
        row["note"] = error
        return row
    found, value = lookup(report, criterion.metric)
    if not found:
        row["note"] = f"metric {criterion.metric!r} is not in the report"
    elif isinstance(value, bool) or not isinstance(value, int | float):
        row["note"] = f"metric {criterion.metric!r} is not a number: {json.dumps(value)[:80]}"
    elif not math.isfinite(value):
        row["note"] = f"metric {criterion.metric!r} is not a finite number ({value})"
    else:
        row["observed"] = value
        row["passed"] = bool(_OPS[criterion.op](value, criterion.value))
    return row


def evaluate(workdir: str | Path, report: str, criteria: list[AcceptancePlan]) -> dict[str, Any]:
    """The acceptance result (module doc) of ``criteria`` against the report."""
    data, status, error = load_report(workdir, report)
    rows = [check(c, data, error) for c in criteria]
    return {
        "report": report,
        "status": status,
        "error": error or None,
        "criteria": rows,
        "all_pass": status == "ok" and all(r["passed"] for r in rows),
    }


def rejection(result: dict[str, Any]) -> str | None:
    """One line saying why the result does not pass, or None when it does."""
    if result["all_pass"]:
        return None
    if result["status"] != "ok":
        return f"acceptance failed: {result['error']}"
    failed = []
    for row in result["criteria"]:
        if row["passed"]:
            continue
        if row["observed"] is None:
            failed.append(row["note"])
        else:
            failed.append(
                f"{row['metric']} = {row['observed']:g} (needs {row['op']} {row['value']:g})"
            )
    return "acceptance failed: " + "; ".join(failed)
