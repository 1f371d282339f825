"""Helpers for running the example scripts directly with python (no controller, no agent)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUICKSTART = EXAMPLES / "quickstart"
PIPELINE = EXAMPLES / "pipeline"

#: A tiny model so that a few steps take well under a second on one thread.
TINY = {
    "QUICKSTART_N_LAYER": "1",
    "QUICKSTART_N_HEAD": "2",
    "QUICKSTART_N_EMBD": "32",
    "QUICKSTART_BLOCK_SIZE": "32",
    "QUICKSTART_BATCH_SIZE": "8",
    "QUICKSTART_EVAL_BATCHES": "2",
    "QUICKSTART_WARMUP_STEPS": "2",
    "QUICKSTART_THREADS": "1",
}

_CLEARED = (
    "CUDA_VISIBLE_DEVICES",
    "CORRAL_NUM_GPUS",
    "CORRAL_STAGE",
    "CORRAL_RUN_ID",
    "CORRAL_ATTEMPT",
    "CORRAL_PROGRESS_FILE",
    "CORRAL_CHECKPOINT_DIR",
    "CORRAL_TRACKERS",
    "CORRAL_BUDGET_USD",
    "CORRAL_HOURLY_PRICE",
    "CORRAL_COST_OFFSET_USD",
    "CORRAL_GRACE_SECONDS",
)


def script_env(**extra: str) -> dict[str, str]:
    """The test's environment without corral's per-stage variables, plus ``extra``."""
    env = {
        k: v for k, v in os.environ.items() if k not in _CLEARED and not k.startswith("QUICKSTART_")
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_script(
    script: Path, *args: str, cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def quickstart_env(base: Path) -> dict[str, str]:
    """A tiny quickstart whose checkpoints and progress file live in ``base/run/``."""
    return script_env(
        **TINY,
        CORRAL_HOME=str(base / "corral-home"),
        CORRAL_CHECKPOINT_DIR=str(base / "run" / "checkpoints"),
        CORRAL_PROGRESS_FILE=str(base / "run" / "progress.jsonl"),
    )
