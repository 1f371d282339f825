"""Runs inside an IO.net container: start corral's agent on the traffic port.

``python -m corral.providers.ionet.boot agent``: the one boot path (:mod:`corral.agent.boot`:
the boot blob from the container's environment) with IO.net's hooks: the agent's files and
the checkpoints on the container's own disk, the agent on ``[::]:<traffic port>``, and no
shutdown command. A container cannot end its own deployment (that takes the API key, which
never reaches the node): when no controller calls any more the agent exits; the controller or
its leak sweep deletes the deployment, and otherwise it ends when its prepaid hours run out.
"""

from __future__ import annotations

import sys

from corral.agent import boot

LAYOUT = boot.Layout(container_disk=True, bind_every_interface=True)


def start_agent(environ: dict[str, str] | None = None, exec_agent: bool = True) -> list[str]:
    return boot.start_agent(environ, exec_agent=exec_agent, layout=LAYOUT, shutdown_command="")


def main(argv: list[str] | None = None) -> int:
    return boot.node_main(
        argv, prog="corral.providers.ionet.boot", layout=LAYOUT, shutdown_command=""
    )


if __name__ == "__main__":
    sys.exit(main())
