"""The test machines' runner (corral.testing.aws) says which processes outlived a stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.errors import NotYetTerminated
from corral.providers.common import process
from corral.testing.aws import MACHINE_FILE, LocalMachineRunner


def test_a_machine_whose_processes_outlive_the_stop_names_their_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = LocalMachineRunner(tmp_path)
    machine = runner.root / "i-0123"
    machine.mkdir(parents=True)
    (machine / MACHINE_FILE).write_text(
        json.dumps(
            {
                "key": "run-a1",
                "root": "/opt/corral",
                "boot_pid": 4242,
                "boot_create_time": 1.0,
                "since": 1.0,
            }
        )
    )
    # a process that no signal ends (one stuck in the kernel, say): every stop leaves it
    survivor = process.Group(4242, 1.0, "user-data")
    monkeypatch.setattr(process, "stop_groups", lambda groups, since, grace: [survivor])

    with pytest.raises(NotYetTerminated, match=r"i-0123: still alive \(4242\b"):
        runner.stop("i-0123", timeout=0.0)
