"""The node side of SaladCloud: the boot blob through 1,000-character env values, the boot
that starts the agent on the container's own disk, and the node hook against the fake
metadata service (machine id event, deletion cost, no raise when there is none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from corral.agent.boot import ENV_BOOT, ENV_PARTS, unpack
from corral.agent.events import EventLog
from corral.agent.hooks import load_node_hook
from corral.providers.base import Bootstrap, Offer
from corral.providers.salad import SaladSettings, boot
from corral.providers.salad.bootstrap import (
    JOIN,
    NODE_HOOK,
    command,
    container_env,
    one_line,
    start_script,
)
from corral.wire.node import NodeContext
from corral.wire.plan import AgentPlan

from ..contract import trivial_plan


def _bootstrap(tmp_path, env=None) -> Bootstrap:
    plan = trivial_plan(tmp_path, "r1-a1")
    return Bootstrap(plan=plan, token="tok-" + uuid.uuid4().hex, env=env or {})


def test_the_boot_blob_travels_in_short_values_and_starts_the_agent_on_the_nodes_disk(tmp_path):
    noise = os.urandom(1500).hex()  # does not compress: the blob needs several values
    big = {"BIG": noise, "HF_TOKEN": "hf-secret-123"}
    b = _bootstrap(tmp_path, big)
    install = "pip install 'corral==9.9'\necho installed\n"  # two lines
    b = b.model_copy(
        update={
            "install": {
                "CORRAL_VERSION": "9.9",
                "CORRAL_WHEEL_URL": "https://x/" + "q" * 1500,
                "CORRAL_INSTALL": install,
                "CORRAL_NODE_INDEX_URL": "",
            }
        }
    )
    env = container_env(b, Offer(provider="salad", offer_id="o"), "r1-a1", SaladSettings())
    assert int(env[ENV_PARTS]) >= 2 and all(1 <= len(v) <= 1000 for v in env.values())
    # SaladCloud's values and arguments are one line each (the script has many: encoded)
    assert all(one_line(v) for v in env.values()) and all(one_line(a) for a in command())
    assert "CORRAL_NODE_INDEX_URL" not in env  # an empty value is left out, not sent
    # the container's command joins what travelled in pieces, as bash on the node would
    assert all(len(a) <= 1000 for a in command()) and command()[2] == JOIN
    assert env["CORRAL_SPLIT"] == "CORRAL_WHEEL_URL" and "CORRAL_WHEEL_URL" not in env
    assert env["CORRAL_B64"] == "CORRAL_INSTALL"
    probe = 'printf "%s|%s|%s" "$CORRAL_WHEEL_URL" "$CORRAL_VERSION" "$CORRAL_INSTALL"; cat "$B"'
    joined = subprocess.run(
        ["bash", "-c", JOIN.replace('exec bash "$B" "$@"', probe)],
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    script = start_script(SaladSettings())
    assert joined == "https://x/" + "q" * 1500 + "|9.9|" + install + script
    node_env = {**env, "HOME": str(tmp_path / "node")}
    argv = boot.start_agent(node_env, exec_agent=False)
    assert node_env["HF_TOKEN"] == "hf-secret-123" and node_env["BIG"] == noise
    assert node_env["CORRAL_AGENT_TOKEN"] == b.token
    assert not [k for k in node_env if k.startswith(ENV_BOOT)] and ENV_PARTS not in node_env
    state = tmp_path / "node" / ".corral" / "runs" / "r1" / "agent-a1"
    assert argv[argv.index("--state-dir") + 1] == str(state)
    assert argv[argv.index("--checkpoint-dir") + 1] == str(state.parent / "checkpoints")
    assert argv[argv.index("--bind") + 1] == "[::]:8750"  # the gateway's port
    plan = AgentPlan.load(state / "plan.json")
    assert plan == b.plan and (state / "plan.json").stat().st_mode & 0o077 == 0
    missing = dict(env)
    missing.pop(f"{ENV_BOOT}_1")
    with pytest.raises(SystemExit, match="do not hold a plan"):
        boot.start_agent(missing, exec_agent=False)
    with pytest.raises(ValueError):
        unpack("not base64 at all")


def test_an_image_without_base64_stops_with_a_line_saying_so(tmp_path):
    b = _bootstrap(tmp_path)
    env = container_env(b, Offer(provider="salad", offer_id="o"), "r1-a1", SaladSettings())
    bin_dir = tmp_path / "bin"  # bash and nothing else on the PATH
    bin_dir.mkdir()
    (bin_dir / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    done = subprocess.run(
        [str(bin_dir / "bash"), "-c", JOIN, "corral-boot", "-m", "x"],
        env={**env, "TMPDIR": str(tmp_path), "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 127 and "does the image have base64?" in done.stderr


def test_the_node_hook_reports_the_machine_and_guards_the_instance(tmp_path, fake, make_provider):
    # a group on the fake gives the hook a metadata service to talk to
    provider = make_provider()
    from .helpers import bootstrap, offer

    chosen = offer(provider)
    inst = provider.launch(chosen, bootstrap(provider, chosen, tmp_path / "w", "k1-a1"), "k1-a1")
    events = EventLog(tmp_path / "events.jsonl")
    context = NodeContext(
        plan=trivial_plan(tmp_path, "k1-a1"),
        events=events,
        state_dir=str(tmp_path),
        checkpoint_dir=str(tmp_path / "ck"),
        environ={
            "SALAD_MACHINE_ID": "machine-7",
            "SALAD_INSTANCE_ID": "inst-1",
            "SALAD_CONTAINER_GROUP_NAME": inst.instance_id,
            "CORRAL_SALAD_IMDS_URL": f"{fake.base_url}/imds/{inst.instance_id}",
        },
    )
    hook = load_node_hook(NODE_HOOK, context)
    [info] = [e for e in events.after(0, 100)[0] if e["type"] == "node.info"]
    assert info["data"]["machine_id"] == "machine-7" and info["data"]["provider"] == "salad"
    assert hook.before_stages(None) is None  # type: ignore[arg-type]
    assert hook.after_stages(None, "succeeded") is None  # type: ignore[arg-type]
    costs = fake.cloud.groups[inst.instance_id].deletion_costs
    assert costs[-2:] == [100000, 0]
    status = hook.status()["node"]
    assert status["machine_id"] == "machine-7" and status["metadata_error"] is None
    assert ("GET", "/v1/status") in {(m, p) for _, m, p in fake.imds_calls}
    hook.close()
    provider.terminate(inst)


def test_without_a_metadata_service_the_hook_notes_it_and_carries_on(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    context = NodeContext(
        plan=trivial_plan(tmp_path, "k1-a1"),
        events=events,
        state_dir=str(tmp_path),
        checkpoint_dir=str(tmp_path),
        environ={"CORRAL_SALAD_IMDS_URL": "http://127.0.0.1:9"},  # nothing listens
    )
    hook = load_node_hook(NODE_HOOK, context)
    assert hook.before_stages(None) is None  # type: ignore[arg-type]
    assert hook.status()["node"]["metadata_error"]
    hook.close()
