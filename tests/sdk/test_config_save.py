"""Saving the resolved config: safe with several processes, written by rank 0 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import corral.sdk.config as config_module
from corral.sdk import TrainingConfig, load_config
from corral.sdk.config import config_path, is_rank_zero


@dataclass
class Cfg(TrainingConfig):
    lr: float = 0.1
    steps: int = 10


def test_a_save_that_interleaves_with_another_process_save_does_not_crash(tmp_path, monkeypatch):
    target = tmp_path / "run" / "config.json"
    real_replace = os.replace
    interleaved = []

    def replace_after_another_save(src, dst):
        if not interleaved:  # another rank writes and renames between our write and rename
            interleaved.append(src)
            Cfg(lr=0.2).save(target)
        real_replace(src, dst)

    monkeypatch.setattr(config_module.os, "replace", replace_after_another_save)
    Cfg(lr=0.3).save(target)
    assert json.loads(target.read_text())["lr"] == 0.3
    assert [p.name for p in target.parent.iterdir()] == ["config.json"]  # no temp left behind


def test_concurrent_load_config_in_several_processes_never_fails(tmp_path: Path):
    script = textwrap.dedent(
        """
        import sys
        from dataclasses import dataclass
        from corral.sdk import TrainingConfig, load_config

        @dataclass
        class Cfg(TrainingConfig):
            lr: float = 0.1

        for _ in range(150):
            load_config(Cfg, argv=["--set", f"lr={sys.argv[1]}"])
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    env["CORRAL_CHECKPOINT_DIR"] = str(tmp_path / "run" / "checkpoints")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(rank)], env=env, stderr=subprocess.PIPE, text=True
        )
        for rank in range(4)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["lr"] in (0.0, 1.0, 2.0, 3.0)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.json"]


@pytest.mark.parametrize(
    ("env", "writes"),
    [
        ({}, True),
        ({"RANK": "0", "LOCAL_RANK": "0"}, True),
        ({"RANK": "3", "LOCAL_RANK": "1"}, False),
        ({"LOCAL_RANK": "1"}, False),
        ({"RANK": "2", "LOCAL_RANK": "0"}, False),  # first process of the second node
        ({"RANK": "not-a-number"}, True),
    ],
)
def test_only_rank_zero_writes_the_resolved_config(env, writes, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert is_rank_zero() is writes
    cfg = load_config(Cfg, argv=["--set", "steps=7"])
    assert cfg.steps == 7  # every rank gets the config
    assert config_path().exists() is writes
