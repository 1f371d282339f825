"""Runs inside a RunPod pod: start corral's agent, or terminate the pod.

``python -m corral.providers.runpod.boot agent`` (the pod's start command ends with it):
reads the plan from ``CORRAL_PLAN_GZ``, creates the workdir, writes the plan as the
controller built it (mode 0600) in the agent's state directory, and replaces itself with
``python -m corral.agent --shutdown-command '<this python> -m ... boot shutdown' --plan FILE``
(plus ``--bind`` when ``CORRAL_AGENT_BIND`` says so; the token stays in
``CORRAL_AGENT_TOKEN``, which the agent removes from its environment).

``python -m corral.providers.runpod.boot shutdown`` (the agent runs it when its job ended and
no controller called for a long time): terminates this pod through the REST API with the key
RunPod puts in every pod (``RUNPOD_API_KEY``, ``RUNPOD_POD_ID``), or with ``runpodctl``.
Prints one line either way and never shows the key.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from corral.providers.runpod.bootstrap import ENV_BIND, ENV_PLAN, ENV_REST_URL, decode_plan

DEFAULT_REST_URL = "https://rest.runpod.io/v1"


def _say(message: str) -> None:
    print(f"corral boot: {message}", file=sys.stderr, flush=True)


def start_agent(environ: dict[str, str] | None = None, exec_agent: bool = True) -> list[str]:
    """Write the plan file and exec the agent (or return the agent's command line when
    ``exec_agent`` is False)."""
    env = os.environ if environ is None else environ
    raw = env.pop(ENV_PLAN, None)
    if not raw:
        raise SystemExit(f"corral boot: {ENV_PLAN} is not set: nothing to run")
    try:
        plan = decode_plan(raw)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"corral boot: {ENV_PLAN} does not hold a plan ({type(exc).__name__})")
    python = shlex.quote(sys.executable)
    launch = ["--shutdown-command", f"{python} -m corral.providers.runpod.boot shutdown"]
    bind = env.get(ENV_BIND, "")
    if bind:
        launch += ["--bind", bind]
    Path(plan["workdir"]).mkdir(parents=True, exist_ok=True)
    state = Path(plan["state_dir"])
    state.mkdir(parents=True, exist_ok=True)
    path = state / "plan.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(plan, f)
    argv = [sys.executable, "-m", "corral.agent", *launch, "--plan", str(path)]
    if exec_agent:
        os.execve(sys.executable, argv, dict(env))
    return argv


def terminate_pod(environ: dict[str, str] | None = None) -> int:
    """Terminate the pod this runs in. Returns a process exit code."""
    env = os.environ if environ is None else environ
    pod_id = env.get("RUNPOD_POD_ID", "")
    key = env.get("RUNPOD_API_KEY", "")
    if not pod_id:
        _say("RUNPOD_POD_ID is not set: not in a RunPod pod")
        return 1
    if key:
        import httpx

        from corral.providers.http import USER_AGENT

        url = env.get(ENV_REST_URL) or DEFAULT_REST_URL
        try:
            resp = httpx.delete(
                f"{url.rstrip('/')}/pods/{pod_id}",
                headers={"Authorization": f"Bearer {key}", "User-Agent": USER_AGENT},
                timeout=30,
            )
        except httpx.HTTPError as exc:
            _say(f"cannot reach the RunPod API ({type(exc).__name__}); trying runpodctl")
        else:
            if resp.is_success or resp.status_code == 404:
                _say(f"pod {pod_id} terminated")
                return 0
            _say(f"the RunPod API answered {resp.status_code}; trying runpodctl")
    try:
        done = subprocess.run(["runpodctl", "remove", "pod", pod_id], check=False, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        _say(f"cannot terminate pod {pod_id}: runpodctl failed ({type(exc).__name__})")
        return 1
    return 0 if done.returncode == 0 else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["agent"]:
        start_agent()
        return 0
    if args == ["shutdown"]:
        return terminate_pod()
    print("usage: python -m corral.providers.runpod.boot {agent|shutdown}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
