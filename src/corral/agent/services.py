"""Service stages on the node: their health and the way in (``docs/agent.md``, "Services").

A service stage (``StagePlan.service``) is run like any stage but never expected to end: it
serves until the attempt is stopped. The agent

* checks its ``health`` path every :data:`HEALTH_EVERY` seconds on ``127.0.0.1:<first port>``
  (a 2xx is healthy) while the stage runs, and shows it in ``GET /status`` under
  ``services``;
* forwards ``/services/<stage>/<path>`` (and ``/services/<stage>:<port>/<path>``) on its own
  port to the service, so the service is reachable wherever the agent is - through a cloud's
  container gateway, a pod's proxy or an open port - without any provider opening more; a
  service with ``root`` also gets every path the agent's own API does not use (a web UI that
  calls absolute paths). :mod:`corral.agent.service_proxy` streams the answers and tunnels
  websockets.

Standard library only (the agent's start-up imports nothing heavy).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.wire.plan import AgentPlan, ServicePlan

HEALTH_EVERY = 5.0
HEALTH_TIMEOUT = 2.0


@dataclass(frozen=True)
class Target:
    stage: str
    port: int
    path: str
    public: bool
    #: where it is mounted on the agent's port ("" at the root)
    prefix: str = ""


def prefix(stage: str) -> str:
    return f"/services/{stage}/"


class Services:
    """The plan's service stages: health checks and forwarding. ``running(name)`` says
    whether a stage runs now (the runner's view)."""

    def __init__(self, plan: AgentPlan, running: Callable[[str], bool]) -> None:
        self.plans: dict[str, ServicePlan] = {
            s.name: s.service for s in plan.stages if s.service is not None
        }
        self._running = running
        self._lock = threading.Lock()
        self._healthy: dict[str, bool | None] = {name: None for name in self.plans}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __bool__(self) -> bool:
        return bool(self.plans)

    def start(self) -> None:
        if self.plans and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="services", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()

    # --- health -----------------------------------------------------------------------------

    def check(self) -> None:
        """One round of health checks (the loop calls it; tests may too)."""
        for name, svc in self.plans.items():
            healthy: bool | None = None
            if self._running(name):
                healthy = self._probe(svc.ports[0], svc.health or "/") if svc.health else None
            with self._lock:
                self._healthy[name] = healthy

    def _probe(self, port: int, path: str) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HEALTH_TIMEOUT)
        try:
            conn.request("GET", path, headers={"User-Agent": "corral-agent-health"})
            return 200 <= conn.getresponse().status < 300
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def _loop(self) -> None:
        while not self._stop.wait(
            0.5 if any(v is None for v in self._healthy.values()) else HEALTH_EVERY
        ):
            self.check()

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {
                    "stage": name,
                    "ports": list(svc.ports),
                    "health": svc.health,
                    "healthy": self._healthy.get(name),
                    "public": svc.public,
                    "running": self._running(name),
                    "path": prefix(name),
                }
                for name, svc in self.plans.items()
            ]

    # --- forwarding -------------------------------------------------------------------------

    def target(self, path: str) -> Target | None:
        """What ``/services/<stage>[:<port>]/<rest>`` (with its query) points to; None if the
        path names no service of the plan or a port it does not declare."""
        rest = path[len("/services/") :]
        head, sep, tail = rest.partition("/")
        name, _, raw_port = head.partition(":")
        svc = self.plans.get(name)
        if svc is None:
            return None
        port = svc.ports[0]
        if raw_port:
            if not raw_port.isdigit() or int(raw_port) not in svc.ports:
                return None
            port = int(raw_port)
        return Target(name, port, "/" + tail if sep else "/", svc.public, f"/services/{head}")

    def root(self, path: str) -> Target | None:
        """The service served at the root of the agent's port (``service.root``), for a path
        the agent's own API does not use; None without one."""
        for name, svc in self.plans.items():
            if svc.root:
                return Target(name, svc.ports[0], path, svc.public, "")
        return None
