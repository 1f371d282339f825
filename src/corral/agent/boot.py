"""A node's one boot path: from what the controller delivered to a running agent.

Every provider's node side runs the same sequence; what differs is a few hooks (how the boot
blob arrives, where the agent keeps its files, how the machine removes itself):

1. take the delivery: the plan as the controller built it, the agent token and the job's env
   (:func:`take_delivery` for a container's environment; a provider with another channel,
   such as a cloud's user-data, builds a :class:`Delivered` itself);
2. put the job's env and the token (``CORRAL_AGENT_TOKEN``, which the agent removes from its
   environment) in the agent's environment, the delivery's variables out of it;
3. create the workdir (unless the code is shipped: that makes its own) and the state dir;
4. write the plan there as it came (mode 0600);
5. build ``python -m corral.agent [--state-dir D] [--checkpoint-dir C] [--bind B]
   [--shutdown-command S] [--root R] --plan FILE`` (:func:`prepare`) and replace this process
   with it (:func:`start_agent`) or, on a machine whose boot script must go on, spawn it.

The one delivery format of container clouds (the only channel to such a node at create time
is its environment): the boot blob, ``{"plan", "token", "env"}`` as JSON, gzip + base64, in
``CORRAL_BOOT_GZ_0`` … ``CORRAL_BOOT_GZ_<n-1>`` of at most :data:`MAX_VALUE` characters each,
with ``n`` in ``CORRAL_BOOT_PARTS`` (:func:`delivery_env`). Every value is one line of base64,
short enough for the strictest provider corral knows (1,000 characters, ``^.*$``).

``python -m corral.agent.boot`` (the default command of corral's image, after the node
bootstrap made sure this corral is there) takes the delivery from the environment and starts
the agent with ``CORRAL_SHUTDOWN_COMMAND`` as its shutdown command. A test host playing the
machine sets ``CORRAL_NODE_ROOT`` (the machine's "/") and ``CORRAL_AGENT_BIND``; a real
machine sets neither. Only the standard library and :mod:`corral.wire` are imported.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import sys
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.wire.env import ENV_AGENT_BIND, ENV_AGENT_TOKEN, ENV_NODE_ROOT, ENV_SHUTDOWN_COMMAND

ENV_BOOT = "CORRAL_BOOT_GZ"
ENV_PARTS = "CORRAL_BOOT_PARTS"
#: the most characters of one delivered value (SaladCloud's bound, the strictest)
MAX_VALUE = 1000


@dataclass(frozen=True)
class Delivered:
    """What the controller sends a node: the agent plan (as JSON data), the agent token and
    the job's environment."""

    plan: dict[str, Any]
    token: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    """Where a provider's node keeps the agent's files. ``container_disk``: the state dir and
    checkpoints on the container's own disk, under ``$HOME/.corral/runs/<run>/`` (a new
    container starts empty: checkpoints come back from object storage), else the plan's
    ``state_dir`` (under the test root, if any). ``bind_every_interface``: the agent binds
    ``[::]:<plan port>`` unless ``CORRAL_AGENT_BIND`` says otherwise."""

    container_disk: bool = False
    bind_every_interface: bool = False


def pack(delivered: Delivered) -> str:
    data = {"plan": delivered.plan, "token": delivered.token, "env": delivered.env}
    return base64.b64encode(gzip.compress(json.dumps(data).encode(), mtime=0)).decode("ascii")


def unpack(value: str) -> Delivered:
    """The delivery in a boot blob; ValueError if it holds none."""
    data = json.loads(gzip.decompress(base64.b64decode(value)))
    if not isinstance(data, dict):
        raise ValueError("the boot blob is not an object")
    plan, token, env = data.get("plan"), data.get("token"), data.get("env") or {}
    if not isinstance(plan, dict) or not isinstance(token, str) or not token:
        raise ValueError("no plan or token")
    if not isinstance(env, dict):
        raise ValueError("env is not an object")
    clean = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}
    return Delivered(plan=plan, token=token, env=clean)


def delivery_env(delivered: Delivered) -> dict[str, str]:
    """The environment values that carry ``delivered`` to a container (see the module doc)."""
    blob = pack(delivered)
    parts = [blob[i : i + MAX_VALUE] for i in range(0, len(blob), MAX_VALUE)]
    env = {f"{ENV_BOOT}_{i}": part for i, part in enumerate(parts)}
    env[ENV_PARTS] = str(len(parts))
    return env


def take_delivery(environ: MutableMapping[str, str]) -> Delivered:
    """The delivery in ``environ``, its variables removed; SystemExit with one line if it
    holds none."""
    try:
        count = int(environ.get(ENV_PARTS) or "0")
        parts = [environ[f"{ENV_BOOT}_{i}"] for i in range(count)]
        delivered = unpack("".join(parts)) if count else None
    except (KeyError, ValueError, OSError) as exc:
        raise SystemExit(f"corral boot: {ENV_BOOT}_* do not hold a plan ({type(exc).__name__})")
    if delivered is None:
        raise SystemExit(f"corral boot: {ENV_PARTS} is not set: nothing to run")
    for name in [k for k in environ if k.startswith(ENV_BOOT + "_")] + [ENV_PARTS]:
        environ.pop(name, None)
    return delivered


def container_dirs(plan: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[Path, Path]:
    """(state dir, checkpoint dir) of the attempt on a container's own disk, under its
    ``$HOME/.corral/runs/<run>/``: the plan's paths are the controller's, and a container
    keeps nothing of another."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    run = home / ".corral" / "runs" / str(plan.get("run_id") or "run")
    return run / f"agent-a{int(plan.get('attempt') or 1)}", run / "checkpoints"


def write_plan(path: Path, text: str) -> None:
    """The plan file, readable by this user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def prepare(
    delivered: Delivered,
    environ: MutableMapping[str, str],
    *,
    layout: Layout = Layout(),
    shutdown_command: str | None = None,
    state_dir: Path | None = None,
    plan_file: Path | None = None,
) -> list[str]:
    """Steps 2-5 of the module doc: ``environ`` becomes the agent's environment, the
    workdir, state dir and plan file are made; returns the agent's command line.
    ``state_dir`` and ``plan_file`` override the layout's (a machine keeping several agents'
    files side by side); ``shutdown_command`` None: ``CORRAL_SHUTDOWN_COMMAND``, if set."""
    plan = delivered.plan
    environ.update(delivered.env)
    environ[ENV_AGENT_TOKEN] = delivered.token
    root = environ.get(ENV_NODE_ROOT, "")

    def here(path: str) -> Path:
        return Path(root, path.lstrip("/")) if root else Path(path)

    checkpoints: Path | None = None
    if state_dir is None and layout.container_disk:
        state_dir, checkpoints = container_dirs(plan, environ)
    state = state_dir if state_dir is not None else here(str(plan["state_dir"]))
    if not plan.get("code"):  # shipped code makes its own workdir
        here(str(plan["workdir"])).mkdir(parents=True, exist_ok=True)
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = plan_file or state / "plan.json"
    write_plan(path, json.dumps(plan, indent=2))
    # on corral's own runtime (started with -E -s: the image's PYTHONPATH and user site are
    # not the agent's) the agent keeps them off too
    isolated = (("-E", sys.flags.ignore_environment), ("-s", sys.flags.no_user_site))
    argv = [sys.executable, *(flag for flag, on in isolated if on), "-m", "corral.agent"]
    if state_dir is not None:
        argv += ["--state-dir", str(state)]
    if checkpoints is not None:
        argv += ["--checkpoint-dir", str(checkpoints)]
    bind = environ.get(ENV_AGENT_BIND, "")
    if not bind and layout.bind_every_interface:
        bind = f"[::]:{plan.get('port') or 8750}"
    if bind:
        argv += ["--bind", bind]
    command = shutdown_command
    if command is None:
        command = environ.get(ENV_SHUTDOWN_COMMAND)
    if command is not None:
        argv += ["--shutdown-command", command]
    if root:
        argv += ["--root", root]
    return [*argv, "--plan", str(path)]


def start_agent(
    environ: MutableMapping[str, str] | None = None,
    *,
    exec_agent: bool = True,
    layout: Layout = Layout(),
    shutdown_command: str | None = None,
) -> list[str]:
    """Take the delivery from a container's environment and replace this process with the
    agent (or, when ``exec_agent`` is False, return its command line, ``environ`` changed in
    place as the agent's would be)."""
    env = os.environ if environ is None else environ
    delivered = take_delivery(env)
    argv = prepare(delivered, env, layout=layout, shutdown_command=shutdown_command)
    if exec_agent:
        os.execve(sys.executable, argv, dict(env))
    return argv


def node_main(
    argv: list[str] | None,
    *,
    prog: str,
    layout: Layout,
    shutdown_command: str,
    shutdown: Callable[[], int] | None = None,
) -> int:
    """A container provider's ``boot`` module's ``main``: ``agent`` starts the agent with the
    provider's layout and shutdown command; ``shutdown`` (when the provider has one) is what
    that command runs."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["agent"]:
        start_agent(layout=layout, shutdown_command=shutdown_command)
        return 0
    if args == ["shutdown"] and shutdown is not None:
        return shutdown()
    usage = "agent|shutdown" if shutdown is not None else "agent"
    print(f"usage: python -m {prog} {{{usage}}}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    start_agent()
