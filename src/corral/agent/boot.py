"""Start the agent in a container from its environment: ``python -m corral.agent.boot``.

What a container provider's node runs (the default command of corral's image, after the node
bootstrap made sure this corral is there): the plan comes gzip + base64 in ``CORRAL_PLAN_GZ``,
the token in ``CORRAL_AGENT_TOKEN`` (the agent removes it from its environment). The plan is
written as the controller built it (mode 0600) in the agent's state directory, and the process
replaces itself with ``python -m corral.agent [--shutdown-command C] [--bind B] [--root R]
--plan FILE`` (``CORRAL_SHUTDOWN_COMMAND``, ``CORRAL_AGENT_BIND``, ``CORRAL_NODE_ROOT``).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import sys
from pathlib import Path
from typing import Any

from corral.wire.env import ENV_AGENT_BIND, ENV_NODE_ROOT, ENV_PLAN_GZ, ENV_SHUTDOWN_COMMAND


def encode_plan(plan_json: str) -> str:
    return base64.b64encode(gzip.compress(plan_json.encode(), mtime=0)).decode("ascii")


def decode_plan(value: str) -> dict[str, Any]:
    return json.loads(gzip.decompress(base64.b64decode(value)))


def start_agent(
    environ: dict[str, str] | None = None,
    *,
    exec_agent: bool = True,
    shutdown_command: str | None = None,
) -> list[str]:
    """Write the plan file and exec the agent (or return its command line when ``exec_agent``
    is False). ``shutdown_command`` wins over ``CORRAL_SHUTDOWN_COMMAND``."""
    env = os.environ if environ is None else environ
    raw = env.pop(ENV_PLAN_GZ, None)
    if not raw:
        raise SystemExit(f"corral boot: {ENV_PLAN_GZ} is not set: nothing to run")
    try:
        plan = decode_plan(raw)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"corral boot: {ENV_PLAN_GZ} does not hold a plan ({type(exc).__name__})")
    launch: list[str] = []
    command = shutdown_command if shutdown_command is not None else env.get(ENV_SHUTDOWN_COMMAND)
    if command:
        launch += ["--shutdown-command", command]
    bind = env.get(ENV_AGENT_BIND, "")
    if bind:
        launch += ["--bind", bind]
    root = env.get(ENV_NODE_ROOT, "")
    if root:
        launch += ["--root", root]

    def here(path: str) -> Path:
        return Path(root, path.lstrip("/")) if root else Path(path)

    if not plan.get("code"):  # shipped code makes its own workdir
        here(plan["workdir"]).mkdir(parents=True, exist_ok=True)
    state = here(plan["state_dir"])
    state.mkdir(parents=True, exist_ok=True)
    path = state / "plan.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(plan, f)
    argv = [sys.executable, "-m", "corral.agent", *launch, "--plan", str(path)]
    if exec_agent:
        os.execve(sys.executable, argv, dict(env))
    return argv


if __name__ == "__main__":
    start_agent()
