"""Runs on the EC2 instance, once, from the user-data script (as root, after corral was
installed): decode the payload, write the agent plan as the controller built it (mode 0600),
start ``corral agent --state-dir <root>/agent/<key>`` detached with the token and the job's
environment in its environment only, delete the payload file.

``python -m corral.providers.aws.boot --payload /opt/corral/bootstrap.b64``

Only the standard library and corral's core are imported (no boto3: the instance does not
need it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from corral.agent.boot import Delivered
from corral.agent.boot import prepare as prepare_agent
from corral.errors import CorralError
from corral.providers.aws.userdata import decode_payload
from corral.providers.common.process import spawn_detached
from corral.wire.env import ENV_NODE_ROOT


def state_dir(root: str, key: str) -> str:
    """Where the agent of launch ``key`` keeps its files on the instance."""
    return f"{root}/agent/{key}"


def prepare(
    payload_path: Path, environ: dict[str, str] | None = None
) -> tuple[list[str], dict[str, str], str, Path]:
    """(argv, env, cwd, output file) of the agent to start; writes the plan file (the one
    boot path, :mod:`corral.agent.boot`, with EC2's hooks: the payload arrives in a file the
    user-data wrote, the agents of several launches keep their files side by side under
    ``<root>/agent/``). A test host playing the instance sets ``CORRAL_NODE_ROOT`` (the
    machine's "/"), ``CORRAL_AGENT_BIND`` and ``CORRAL_SHUTDOWN_COMMAND``; a real instance
    sets none."""
    env = dict(os.environ if environ is None else environ)
    node = env.get(ENV_NODE_ROOT, "")

    def here(path: str) -> Path:
        return Path(node, path.lstrip("/")) if node else Path(path)

    payload = decode_payload(payload_path.read_text())
    plan = payload.plan
    agent_dir = here(payload.root) / "agent"
    agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    here(plan.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    delivered = Delivered(plan.model_dump(mode="json"), payload.token, dict(payload.env))
    argv = prepare_agent(
        delivered,
        env,
        state_dir=here(state_dir(payload.root, payload.key)),
        plan_file=agent_dir / f"{payload.key}.plan.json",
    )
    return argv, env, str(agent_dir), agent_dir / f"{payload.key}.out"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corral.providers.aws.boot")
    parser.add_argument("--payload", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        cmd, env, cwd, out = prepare(args.payload)
    except (CorralError, OSError, ValueError) as exc:
        print(f"corral boot: error: {exc}", file=sys.stderr)
        return 2
    pid, _ = spawn_detached(cmd, cwd, env, out)
    args.payload.unlink(missing_ok=True)
    print(f"corral boot: agent started (pid {pid}, output {out})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
