"""The SaladCloud node hook (:mod:`corral.wire.node`), loaded by the agent inside the container.

SaladCloud has no preemption notice to poll (an interrupted node just disappears; the
controller sees the replica back in ``allocating`` or on another machine). What the node can
do is make each attempt's machine known and keep the working instance:

* at start, one ``node.info`` event with the machine, instance and group SaladCloud put in
  the environment (``SALAD_MACHINE_ID``, ``SALAD_INSTANCE_ID``...), so ``corral events``
  shows which machine each attempt ran on (a recovered attempt shows another one); the same
  in ``GET /status`` under ``node``, with what the metadata service says of the container's
  probes when it answered;
* while stages run, a high deletion cost through the metadata service (a scale-down of the
  group takes another replica first); 0 once they are done. The agent itself stops the job
  gracefully on SIGTERM, which SaladCloud sends when it stops a container.

Nothing here raises into the runner: a metadata service that does not answer (not on
SaladCloud, or an old node) is noted in the status and otherwise ignored.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from corral.providers.salad.imds import MAX_DELETION_COST, Imds, ImdsError
from corral.wire.events import NODE_INFO
from corral.wire.node import NodeContext, NodeRunner

_IDENTITY = {
    "machine_id": "SALAD_MACHINE_ID",
    "instance_id": "SALAD_INSTANCE_ID",
    "container_group": "SALAD_CONTAINER_GROUP_NAME",
    "organization": "SALAD_ORGANIZATION_NAME",
    "project": "SALAD_PROJECT_NAME",
}


class SaladNode:
    name = "salad"

    def __init__(self, context: NodeContext, *, imds: Imds | None = None) -> None:
        env: Mapping[str, str] = context.environ or os.environ
        self.identity = {k: env.get(v) or None for k, v in _IDENTITY.items()}
        self._imds = imds or Imds.from_env(env)
        self._lock = threading.Lock()
        self.imds_status: dict[str, Any] | None = None
        self.imds_error: str | None = None
        self.deletion_cost: int | None = None
        try:
            self.imds_status = self._imds.status()
        except ImdsError as exc:
            self.imds_error = str(exc)
        context.events.emit(NODE_INFO, data={"provider": "salad", **self.identity})

    def _cost(self, cost: int) -> None:
        if self.imds_error is not None and self.imds_status is None:
            return  # no metadata service here: do not wait on it again
        try:
            self._imds.set_deletion_cost(cost)
        except ImdsError as exc:
            with self._lock:
                self.imds_error = str(exc)
            return
        with self._lock:
            self.deletion_cost = cost

    def before_stages(self, runner: NodeRunner) -> str | None:
        self._cost(MAX_DELETION_COST)
        return None

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None:
        self._cost(0)
        return None

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "node": {
                    "provider": "salad",
                    **self.identity,
                    "probes": self.imds_status,
                    "deletion_cost": self.deletion_cost,
                    "metadata_error": self.imds_error,
                }
            }

    def close(self) -> None:
        self._imds.close()
