"""Runs inside a RunPod pod: start corral's agent, or terminate the pod.

``python -m corral.providers.runpod.boot agent`` (the pod's start command ends with it): the
one boot path (:mod:`corral.agent.boot`: the boot blob from the pod's environment, the plan
written in the plan's state directory) with RunPod's hooks: the agent's shutdown command is
``<this python> -m corral.providers.runpod.boot shutdown``, and it binds the plan's address
unless ``CORRAL_AGENT_BIND`` says otherwise.

``python -m corral.providers.runpod.boot shutdown`` (the agent runs it when its job ended and
no controller called for a long time): terminates this pod through the REST v2 API
(``DELETE /v2/pods/{id}``) with the pod-scoped key RunPod puts in every pod
(``RUNPOD_API_KEY``, ``RUNPOD_POD_ID``), or, when the API cannot be reached or refuses, with
the ``runpodctl`` every pod has (``runpodctl pod delete <id>``, runpodctl v2). Prints one line
either way and never shows the key.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from corral.agent import boot
from corral.providers.runpod.bootstrap import ENV_REST_URL

DEFAULT_REST_URL = "https://api.runpod.io/v2"
SHUTDOWN = f"{shlex.quote(sys.executable)} -m corral.providers.runpod.boot shutdown"


def _say(message: str) -> None:
    print(f"corral boot: {message}", file=sys.stderr, flush=True)


def start_agent(environ: dict[str, str] | None = None, exec_agent: bool = True) -> list[str]:
    """Write the plan file and exec the agent (or return the agent's command line when
    ``exec_agent`` is False), with this module's ``shutdown`` as the shutdown command."""
    return boot.start_agent(environ, exec_agent=exec_agent, shutdown_command=SHUTDOWN)


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
    # runpodctl (in every pod, with the pod's key) v2 syntax: `runpodctl pod delete <id>`
    # (docs runpodctl/reference/runpodctl-pod; v1's `remove pod` is gone)
    try:
        done = subprocess.run(
            ["runpodctl", "pod", "delete", pod_id],
            check=False,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env=dict(env),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _say(f"cannot terminate pod {pod_id}: runpodctl failed ({type(exc).__name__})")
        return 1
    if done.returncode != 0:
        _say(f"cannot terminate pod {pod_id}: runpodctl pod delete exited {done.returncode}")
        return 1
    _say(f"pod {pod_id} terminated (runpodctl)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return boot.node_main(
        argv,
        prog="corral.providers.runpod.boot",
        layout=boot.Layout(),
        shutdown_command=SHUTDOWN,
        shutdown=terminate_pod,
    )


if __name__ == "__main__":
    sys.exit(main())
