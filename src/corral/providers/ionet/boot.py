"""Runs inside an IO.net container: start corral's agent on the traffic port.

``python -m corral.providers.ionet.boot agent``: reads the boot blob from ``CORRAL_BOOT_GZ``
(and removes it), creates the workdir, writes the plan (mode 0600) in the agent's state
directory, puts the job's env and the agent token in the environment, and replaces itself
with ``python -m corral.agent --bind [::]:<port> --shutdown-command '' --plan FILE``. A
container cannot end its own deployment (that takes the API key, which never reaches the
node): when no controller calls any more the agent exits; the controller or its leak sweep
deletes the deployment, and otherwise it ends when its prepaid hours run out.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from corral.providers.common.boot_blob import node_dirs, read_blob
from corral.providers.ionet.bootstrap import ENV_BIND, ENV_BOOT
from corral.wire.env import ENV_AGENT_TOKEN, ENV_NODE_ROOT


def start_agent(environ: dict[str, str] | None = None, exec_agent: bool = True) -> list[str]:
    env = os.environ if environ is None else environ
    raw = env.pop(ENV_BOOT, None)
    try:
        plan, token, job_env = read_blob(raw or "")
    except (ValueError, OSError) as exc:
        raise SystemExit(f"corral boot: {ENV_BOOT} does not hold a plan ({type(exc).__name__})")
    env.update(job_env)
    env[ENV_AGENT_TOKEN] = token
    bind = env.get(ENV_BIND) or f"[::]:{plan.get('port') or 8750}"
    root = env.get(ENV_NODE_ROOT, "")  # a test's stand-in for the container's "/"
    if not plan.get("code"):  # shipped code makes its own workdir
        workdir = str(plan["workdir"])
        Path(root, workdir.lstrip("/") if root else workdir).mkdir(parents=True, exist_ok=True)
    state, checkpoints = node_dirs(plan, env)
    state.mkdir(parents=True, exist_ok=True)
    path = state / "plan.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(plan, f)
    argv = [
        sys.executable,
        "-m",
        "corral.agent",
        "--state-dir",
        str(state),
        "--checkpoint-dir",
        str(checkpoints),
        "--bind",
        bind,
        "--shutdown-command",
        "",
        *(["--root", root] if root else []),
        "--plan",
        str(path),
    ]
    if exec_agent:
        os.execve(sys.executable, argv, dict(env))
    return argv


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["agent"]:
        start_agent()
        return 0
    print("usage: python -m corral.providers.ionet.boot agent", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
