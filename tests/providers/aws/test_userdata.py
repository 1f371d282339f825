"""What an EC2 machine needs from the plan (the node contribution), the user-data, and the
boot step that starts the agent on the instance."""

from __future__ import annotations

import importlib
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from corral.errors import BadInput
from corral.providers.aws.userdata import (
    MAX_USER_DATA,
    NOTICE_HOOK,
    SHUTDOWN_COMMAND,
    MachinePayload,
    decode_payload,
    encode_payload,
    extract_payload,
    node_profile,
    user_data,
)
from corral.providers.common.wheel import bootstrap_script
from corral.wire.node import NodeHook
from support.waiting import wait_until

from ..contract import trivial_plan

TOKEN = "agent-token-0123456789abcdef"
SECRET = "job-secret-value-fedcba9876543210"


def payload(tmp_path: Path, **plan_update: object) -> MachinePayload:
    plan = trivial_plan(tmp_path, "run1-a1").model_copy(update=plan_update)
    return MachinePayload(
        key="run1-a1", root="/opt/corral", plan=plan, token=TOKEN, env={"HF_TOKEN": SECRET}
    )


def test_a_machine_listens_for_the_controller_and_powers_off_without_it() -> None:
    m = node_profile("run1", port=7450, spot=True)
    assert (m.host, m.port) == ("0.0.0.0", 7450)
    assert m.shutdown_command == SHUTDOWN_COMMAND
    assert m.controller_timeout_s and m.controller_timeout_s > 0
    assert m.node_hooks == [NOTICE_HOOK]  # a spot machine polls for interruption notices
    assert m.max_grace_seconds == 90.0  # inside the two-minute notice
    assert m.checkpoint_dir is None  # the spec's
    od = node_profile("run1", port=1, spot=False, data_mount="/mnt/d")
    assert od.node_hooks == []
    assert od.checkpoint_dir == "/mnt/d/run1/checkpoints"


def test_the_notice_hook_reference_names_a_node_hook_in_the_aws_folder() -> None:
    module, _, attr = NOTICE_HOOK.partition(":")
    assert module.startswith("corral.providers.aws.")
    cls = getattr(importlib.import_module(module), attr)
    for method in ("before_stages", "after_stages", "status", "close"):
        assert callable(getattr(cls, method))
    assert NodeHook.__name__ == "NodeHook"


def test_user_data_is_valid_bash_and_carries_the_payload_encoded(tmp_path) -> None:
    p = payload(tmp_path).model_copy(update={"data_mount": "/mnt/corral-data"})
    script = user_data(p, install="corral==0.1.0", volume_id="vol-0abc123")
    assert script.startswith("#!/bin/bash\n")
    check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    assert TOKEN not in script and SECRET not in script  # encoded, not printed in clear
    # the node bootstrap, told to install with the requirement given (an advanced override)
    assert bootstrap_script().rstrip() in script
    assert "export CORRAL_INSTALL=corral==0.1.0" in script
    assert "export CORRAL_VERSION=" in script
    assert "nvme-Amazon_Elastic_Block_Store_vol0abc123" in script
    assert 'mount "$DEV" /mnt/corral-data' in script
    assert "Elastic_Block_Store" not in user_data(payload(tmp_path), install="corral")
    assert "shutdown -h now" in script and "corral.providers.aws.boot" in script
    back = extract_payload(script)
    assert back == p
    assert decode_payload(encode_payload(p)) == p


def test_broken_or_foreign_user_data_is_bad_input(tmp_path) -> None:
    with pytest.raises(BadInput, match="not written by corral"):
        extract_payload("#!/bin/bash\necho hi\n")
    script = user_data(payload(tmp_path), install="corral")
    with pytest.raises(BadInput, match="truncated"):
        extract_payload(script[: script.index("CORRAL_PAYLOAD'") + 40])
    with pytest.raises(BadInput, match="unreadable"):
        decode_payload("not base64 at all !!")


def test_a_plan_too_large_for_user_data_is_refused_before_any_launch(tmp_path) -> None:
    noise = {f"VAR_{i}": os.urandom(32).hex() for i in range(300)}  # incompressible
    with pytest.raises(BadInput, match=f"limit {MAX_USER_DATA}"):
        user_data(payload(tmp_path, env=noise), install="corral")


def test_boot_writes_a_private_plan_and_starts_the_agent_with_the_token(tmp_path) -> None:
    """What the instance does at first boot, run for real with a loopback plan."""
    root = tmp_path / "root"
    p = payload(tmp_path, host="127.0.0.1", port=0).model_copy(update={"root": str(root)})
    (tmp_path / "bootstrap.b64").write_text(encode_payload(p))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_AGENT")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "corral.providers.aws.boot",
            "--payload",
            str(tmp_path / "bootstrap.b64"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "bootstrap.b64").exists()
    plan_file = root / "agent" / "run1-a1.plan.json"
    assert stat.S_IMODE(plan_file.stat().st_mode) == 0o600
    assert TOKEN not in plan_file.read_text() and SECRET not in plan_file.read_text()
    agent_json = root / "agent" / "run1-a1" / "agent.json"  # the machine's state dir
    wait_until(
        agent_json.exists,
        20,
        0.1,
        lambda: f"{agent_json}; agent output: " + (root / "agent" / "run1-a1.out").read_text(),
    )
    info = json.loads(agent_json.read_text())
    try:
        r = httpx.get(f"{info['url']}/status", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200 and r.json()["run_id"] == "run1"
        assert httpx.get(f"{info['url']}/status").status_code == 401
        proc = psutil.Process(info["pid"])
        assert TOKEN not in " ".join(proc.cmdline())  # given in the environment only
        assert proc.environ().get("HF_TOKEN") == SECRET
    finally:
        os.killpg(info["pid"], signal.SIGKILL)
