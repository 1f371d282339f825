"""Shared by ``cancel`` and ``stop``: ask for the action through the service, print the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.service.run_view import RunView


def request(run_ref: str, action: str, *, wait: bool, json_: bool) -> RunView:
    from corral.cli.output import console, print_json
    from corral.remote import connect

    remote = connect()
    if remote is not None:  # CORRAL_SERVER: the server records the request
        run = remote.request(run_ref, action, wait=wait)
    else:
        from corral.service.actions import request as request_action

        run = request_action(run_ref, action, wait=wait)
    if json_:
        print_json(run)
    elif run.terminal:
        console.print(f"{run.id}: {run.state} ({run.reason})")
    else:
        verb = "cancelling" if action == "cancel" else "stopping"
        console.print(f"{verb} {run.id}; follow with: corral status {run.id}")
    return run
