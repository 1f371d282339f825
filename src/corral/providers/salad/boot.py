"""Runs inside a SaladCloud container: start corral's agent.

``python -m corral.providers.salad.boot agent`` (the container's command ends with it): joins
the boot blob from ``CORRAL_BOOT_GZ_<i>`` (and removes those variables), creates the workdir,
writes the plan as the controller built it (mode 0600) in the agent's state directory, puts
the job's env and the agent token (``CORRAL_AGENT_TOKEN``, which the agent removes from its
environment) in the environment, and replaces itself with ``python -m corral.agent
--state-dir ... --checkpoint-dir ... --bind [::]:<port> --shutdown-command '...' --plan FILE``:
the agent's files and the checkpoints on the container's own disk
(``$HOME/.corral/runs/<run>/``; a new node starts empty, checkpoints come back from object
storage).

``python -m corral.providers.salad.boot shutdown`` is the agent's shutdown command (its job
ended and no controller called for ``controller_timeout_s``). A container cannot delete its
own group (that takes the API key, which never reaches the node), so the agent simply exits:
with ``restart_policy: never`` the container stays down; the controller or its leak sweep
deletes the group. The command asks the metadata service to make this instance the first to
go should the group be scaled (deletion cost 0) and prints one line.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from corral.providers.common.boot_blob import node_dirs, read_blob
from corral.providers.salad.bootstrap import ENV_BIND, ENV_BOOT, ENV_PARTS, joined
from corral.wire.env import ENV_AGENT_TOKEN, ENV_NODE_ROOT


def _say(message: str) -> None:
    print(f"corral boot: {message}", file=sys.stderr, flush=True)


def start_agent(environ: dict[str, str] | None = None, exec_agent: bool = True) -> list[str]:
    """Write the plan file and exec the agent (or return its command line when
    ``exec_agent`` is False; ``environ`` is then changed in place as the agent's would be)."""
    env = os.environ if environ is None else environ
    try:
        plan, token, job_env = read_blob(joined(dict(env)))
    except (ValueError, OSError) as exc:
        raise SystemExit(f"corral boot: {ENV_BOOT}_* do not hold a plan ({type(exc).__name__})")
    for name in [k for k in env if k.startswith(ENV_BOOT + "_")] + [ENV_PARTS]:
        env.pop(name, None)
    env.update(job_env)
    env[ENV_AGENT_TOKEN] = token
    python = shlex.quote(sys.executable)
    port = plan.get("port") or 8750
    bind = env.get(ENV_BIND) or f"[::]:{port}"
    state, checkpoints = node_dirs(plan, env)
    launch = [
        "--state-dir",
        str(state),
        "--checkpoint-dir",
        str(checkpoints),
        "--bind",
        bind,
        "--shutdown-command",
        f"{python} -m corral.providers.salad.boot shutdown",
    ]
    root = env.get(ENV_NODE_ROOT, "")
    if root:  # a test's stand-in for the container's own "/" (a real container sets none)
        launch += ["--root", root]
    if not plan.get("code"):  # shipped code makes its own workdir
        workdir = str(plan["workdir"])
        Path(root, workdir.lstrip("/") if root else workdir).mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    path = state / "plan.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(plan, f)
    argv = [sys.executable, "-m", "corral.agent", *launch, "--plan", str(path)]
    if exec_agent:
        os.execve(sys.executable, argv, dict(env))
    return argv


def shutdown(environ: dict[str, str] | None = None) -> int:
    """The agent is about to exit for lack of a controller (see the module doc)."""
    from corral.providers.salad.imds import Imds, ImdsError

    env = os.environ if environ is None else environ
    group = env.get("SALAD_CONTAINER_GROUP_NAME", "this container group")
    try:
        with Imds.from_env(env) as imds:
            imds.set_deletion_cost(0)
    except ImdsError as exc:
        _say(f"metadata service: {exc}")
    _say(f"no controller: the agent exits; delete {group} to stop paying for it")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["agent"]:
        start_agent()
        return 0
    if args == ["shutdown"]:
        return shutdown()
    print("usage: python -m corral.providers.salad.boot {agent|shutdown}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
