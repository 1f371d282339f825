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

from corral.errors import CorralError
from corral.providers.aws.userdata import decode_payload
from corral.providers.common.process import spawn_detached
from corral.wire.env import (
    ENV_AGENT_BIND,
    ENV_AGENT_TOKEN,
    ENV_NODE_ROOT,
    ENV_SHUTDOWN_COMMAND,
)


def state_dir(root: str, key: str) -> str:
    """Where the agent of launch ``key`` keeps its files on the instance."""
    return f"{root}/agent/{key}"


def prepare(
    payload_path: Path, environ: dict[str, str] | None = None
) -> tuple[list[str], dict[str, str], str, Path]:
    """(argv, env, cwd, output file) of the agent to start; writes the plan file. A test host
    playing the instance sets ``CORRAL_NODE_ROOT`` (the machine's "/"), ``CORRAL_AGENT_BIND``
    and ``CORRAL_SHUTDOWN_COMMAND``; a real instance sets none."""
    base = dict(os.environ if environ is None else environ)
    node = base.get(ENV_NODE_ROOT, "")

    def here(path: str) -> Path:
        return Path(node, path.lstrip("/")) if node else Path(path)

    payload = decode_payload(payload_path.read_text())
    plan = payload.plan
    agent_dir = here(payload.root) / "agent"
    agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    state = str(here(state_dir(payload.root, payload.key)))
    if plan.code is None:  # shipped code makes its own workdir
        here(plan.workdir).mkdir(parents=True, exist_ok=True)
    here(plan.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    Path(state).mkdir(mode=0o700, parents=True, exist_ok=True)
    plan_path = agent_dir / f"{payload.key}.plan.json"
    fd = os.open(plan_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(plan.model_dump_json(indent=2))
    env = {**base, **payload.env, ENV_AGENT_TOKEN: payload.token}
    argv = [sys.executable, "-m", "corral.agent", "--state-dir", state]
    if node:
        argv += ["--root", node]
    if base.get(ENV_AGENT_BIND):
        argv += ["--bind", base[ENV_AGENT_BIND]]
    if ENV_SHUTDOWN_COMMAND in base:
        argv += ["--shutdown-command", base[ENV_SHUTDOWN_COMMAND]]
    argv += ["--plan", str(plan_path)]
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
