"""Shared by ``cancel`` and ``stop``: record the request, make sure a controller acts on it."""

from __future__ import annotations

from typing import Any


def request(run_ref: str, action: str, *, wait: bool, json_: bool) -> Any:
    from corral.cli.output import console, print_json, run_dict
    from corral.control.daemon import start_background
    from corral.store import Store

    store = Store.open()
    run = store.get_run(run_ref)
    run = store.request_action(run.id, action)
    start_background(wait_s=5.0)
    if wait:
        from corral.cli.waiting import wait_for_end

        run = wait_for_end(store, run.id)
    if json_:
        print_json(run_dict(run))
    elif run.terminal:
        console.print(f"{run.id}: {run.state} ({run.reason})")
    else:
        verb = "cancelling" if action == "cancel" else "stopping"
        console.print(f"{verb} {run.id}; follow with: corral status {run.id}")
    return run
