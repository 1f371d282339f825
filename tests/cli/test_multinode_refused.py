"""Where no enabled provider can give the job its gang, ``corral launch`` of a multi-node job is
refused at once with one line saying why for each provider, and nothing is started: never the
job on one node instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.errors import EXIT_PROVIDER
from corral.providers.fake import ENV_FAKE_CLOUD

from .launched import TWO_GPUS
from .test_debug import cli, write_spec

SPEC = """
name: gang
resources: {nodes: 2, gpus: "L40S:2"}
run: torchrun train.py
"""


def test_a_multi_node_launch_is_refused_in_one_line_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps(TWO_GPUS))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "local")
    code, out, err = cli("launch", write_spec(tmp_path, SPEC), "--detach")
    assert code == EXIT_PROVIDER, (out, err)
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "cannot give one job 2 machines (this machine is one node" in line
    code, out, _ = cli("ls", "--json")
    assert code == 0 and json.loads(out) == []  # no run was recorded, nothing launched
    # one node of the same job launches (the refusal is about the gang, not the machine)
    code, out, err = cli("validate", write_spec(tmp_path, SPEC.replace("nodes: 2", "nodes: 1")))
    assert code == 0, err
