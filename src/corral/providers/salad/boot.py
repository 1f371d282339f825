"""Runs inside a SaladCloud container: start corral's agent.

``python -m corral.providers.salad.boot agent`` (the container's command ends with it): the
one boot path (:mod:`corral.agent.boot`: the boot blob from the container's environment) with
SaladCloud's hooks: the agent's files and the checkpoints on the container's own disk
(``$HOME/.corral/runs/<run>/``; a new node starts empty, checkpoints come back from object
storage), the agent on ``[::]:<port>`` (the gateway's port), and this module's ``shutdown`` as
its shutdown command.

``python -m corral.providers.salad.boot shutdown`` is the agent's shutdown command (its job
ended and no controller called for ``controller_timeout_s``). A container cannot delete its
own group (that takes the API key, which never reaches the node), so the agent simply exits:
with ``restart_policy: never`` the container stays down; the controller or its leak sweep
deletes the group. The command asks the metadata service to make this instance the first to
go should the group be scaled (deletion cost 0) and prints one line.
"""

from __future__ import annotations

import os
import shlex
import sys

from corral.agent import boot

LAYOUT = boot.Layout(container_disk=True, bind_every_interface=True)
SHUTDOWN = f"{shlex.quote(sys.executable)} -m corral.providers.salad.boot shutdown"


def _say(message: str) -> None:
    print(f"corral boot: {message}", file=sys.stderr, flush=True)


def start_agent(environ: dict[str, str] | None = None, exec_agent: bool = True) -> list[str]:
    """Write the plan file and exec the agent (or return its command line when
    ``exec_agent`` is False; ``environ`` is then changed in place as the agent's would be)."""
    return boot.start_agent(
        environ, exec_agent=exec_agent, layout=LAYOUT, shutdown_command=SHUTDOWN
    )


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
    return boot.node_main(
        argv,
        prog="corral.providers.salad.boot",
        layout=LAYOUT,
        shutdown_command=SHUTDOWN,
        shutdown=shutdown,
    )


if __name__ == "__main__":
    sys.exit(main())
