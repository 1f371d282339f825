"""``benchmarks/foreign.py`` runs end to end (small sizes) and reports its figures, in a
subprocess as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "foreign.py"


def test_the_foreign_benchmark_reports_lag_and_slowdown(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--size-mb", "2", "--every", "1",
         "--duration", "4", "--pairs", "2", "--step-ms", "5", "--dir", str(tmp_path),
         "--preempt-every", "0.5", "--preempt-size-mb", "2", "--trials", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["saves"] >= 2 and result["uploads"] >= 1
    assert 0 <= result["mirror_lag_s"] <= result["mirror_lag_max_s"] < 10
    assert result["step_ms_unmirrored"] > 0 and result["step_ms_mirrored"] > 0
    assert isinstance(result["slowdown_pct"], float) and len(result["slowdown_pairs_pct"]) == 2
    # preempted at a random moment: never less lost than the floor (the target, at most one
    # save interval more, is the benchmark's to show on a machine of its own)
    assert result["lost_vs_floor_0.5s"] >= 0
    assert result["lost_vs_floor_mean_0.5s"] <= result["lost_vs_floor_0.5s"]
    assert 0 < result["mirrored_share_0.5s"] <= 1 and result["floor_mean_0.5s"] >= 0
    assert list(tmp_path.iterdir()) == []  # its files are removed at the end
