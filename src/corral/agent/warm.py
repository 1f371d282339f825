"""A warm agent: ``python -m corral.agent.warm`` loads the agent, then waits for its attempt.

A queue worker starts one while it is idle (:mod:`corral.queue.warm`), so an attempt it takes
starts with Python up and the agent's modules loaded: without it, an attempt pays a fresh
interpreter and the agent's imports (pydantic models, the HTTP server, the code stage) before
its job's first line, which on a busy machine is most of the pool's start.

The order comes on stdin as one JSON line, once: ``argv`` (``corral agent``'s arguments),
``env`` (the agent's whole environment, its token included), ``cwd``, and ``out`` (the file
the agent's output goes to). The process then is what ``python -m corral.agent ARGV`` would
have been: same environment, directory, output, process group (its own, made by the worker)
and death signal (set by the worker when it started it). End of stdin before an order (the
worker went away, or stops this one): it exits 0 having run nothing.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from corral.startup import skip_pydantic_plugins

#: what the agent loads while it starts its first attempt, loaded here beforehand: the agent,
#: the code stage (shipped code), the HTTP API and its server, the stage trackers, GPU reads
PRELOAD = (
    "corral.agent.main",
    "corral.agent.code",
    "corral.agent.api",
    "corral.agent.server",
    "corral.agent.log_progress",
    "corral.gpu",
    "psutil",
)


def preload() -> None:
    """Import what the agent needs to start an attempt."""
    import importlib

    skip_pydantic_plugins()  # before the plan's models are built, as ``corral.agent`` does
    for name in PRELOAD:
        importlib.import_module(name)


def take_order(order: object) -> list[str]:
    """Become the process the order describes (output, environment, directory); its
    ``corral agent`` arguments. ValueError when the order is not one."""
    if not isinstance(order, dict):
        raise ValueError("a JSON object expected")
    argv, env = order.get("argv"), order.get("env")
    cwd, out = order.get("cwd"), order.get("out")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv: a list of strings expected")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError("env: a mapping of strings expected")
    if not isinstance(cwd, str) or not isinstance(out, str):
        raise ValueError("cwd and out: paths expected")
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the order's pipe is done with: as a cold agent, stdin is null
    os.close(devnull)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # found again from the order's TMPDIR, if any
    return list(argv)


def main() -> int:
    preload()
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0
    try:
        argv = take_order(json.loads(line))
    except (ValueError, OSError) as exc:
        print(f"corral agent: error: a warm agent's order cannot be taken: {exc}", file=sys.stderr)
        return 2
    sys.argv = [sys.argv[0], *argv]
    from corral.agent.main import main as agent_main

    return agent_main(argv)


if __name__ == "__main__":
    sys.exit(main())
