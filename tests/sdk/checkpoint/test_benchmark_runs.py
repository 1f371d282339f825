"""``benchmarks/checkpoint.py`` runs end to end (a small size, one round) and reports every key
the issue names, in a subprocess as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "checkpoint.py"
KEYS = ("stall_s", "torch_save_s", "dcp_async_stall_s", "write_gbps", "dd_gbps", "restore_s",
        "stall_vs_torch_save",
        "torch_load_s", "torch_copy_s", "stall_vs_copy_floor", "copy_kind", "targets_met")  # fmt: skip


def test_the_checkpoint_benchmark_reports_every_figure(tmp_path):
    pytest.importorskip("torch")
    tmp_path = tmp_path / "bench"
    tmp_path.mkdir()
    done = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--sizes", "32", "--rounds", "1",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)["32"]
    for key in KEYS:
        assert key in result, key
    assert result["stall_s"] > 0 and result["torch_save_s"] > 0 and result["restore_s"] > 0
    assert result["write_gbps"] > 0 and result["dd_gbps"] > 0
    assert result["stall_vs_copy_floor"] == pytest.approx(
        result["stall_s"] / result["torch_copy_s"]
    )
    assert set(result["targets_met"]) - {"gpu_stall"} == {"stall", "write", "restore"}
    import torch

    gpu = ("gpu_stall_s", "gpu_torch_save_s", "gpu_step_s")
    assert all((key in result) == torch.cuda.is_available() for key in gpu)
    assert list(tmp_path.iterdir()) == []  # its files are removed at the end


SHARDED = BENCH.parent / "checkpoint_sharded.py"


@pytest.mark.slow
def test_the_sharded_checkpoint_benchmark_reports_every_figure(tmp_path):
    pytest.importorskip("torch")
    tmp_path = tmp_path / "bench"
    tmp_path.mkdir()
    done = subprocess.run(
        [sys.executable, str(SHARDED), "--json", "--shard-mib", "64", "--rounds", "1",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    for world in (2, 4):
        assert result[f"sharded_{world}_s"] > 0 and result[f"single_{world}_s"] > 0
        assert result[f"sharded_speedup_{world}"] == pytest.approx(
            result[f"single_{world}_s"] / result[f"sharded_{world}_s"]
        )
    assert result["restore_2_to_4_s"] > 0 and result["restore_4_to_2_s"] > 0
    assert list(tmp_path.iterdir()) == []
