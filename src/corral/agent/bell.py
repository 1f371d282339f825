"""The agent's side of the bell (:mod:`corral.wire.bell`): ring the controller when something
happens, beat while nothing does.

The address comes from the controller's requests (:meth:`AgentBell.heard_from`, called for
every authenticated request), so a restarted controller, or another one that took the run
over, is rung from its first request on. Sending never blocks and never raises: a bell that
cannot be reached changes nothing (the controller keeps pulling).
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from corral.wire import bell
from corral.wire.events import PROGRESS


class AgentBell:
    def __init__(self, run_id: str, attempt: int, token: str, *, beat_s: float = bell.BEAT_S):
        self.run_id = run_id
        self.attempt = attempt
        self._token = token
        self._beat_s = beat_s
        self._lock = threading.Lock()
        self._address: bell.BellAddress | None = None
        self._target: tuple[Any, ...] | None = None
        self._sock: socket.socket | None = None
        self._n = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> bell.BellAddress | None:
        return self._address

    def heard_from(self, header: str | None) -> None:
        """A controller's request named its bell (``header``): ring ``hello`` if it is new."""
        found = bell.parse_header(header)
        if found is None or found == self._address:
            return
        with self._lock:
            if found == self._address:
                return
            new_place = self._address is None or (found.host, found.port) != (
                self._address.host,
                self._address.port,
            )
            self._address = found
            if new_place:
                self._target = self._resolve(found)
        if new_place:
            self.ring("hello")
            self._start_beating()

    def _resolve(self, address: bell.BellAddress) -> tuple[Any, ...] | None:
        try:
            info = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_DGRAM)[0]
        except OSError:
            return None
        family, _, _, _, target = info
        if self._sock is None or self._sock.family != family:
            if self._sock is not None:
                self._sock.close()
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        return tuple(target)

    def on_event(self, event: dict[str, Any]) -> None:
        """An event was recorded: ring ``change`` unless it is a progress record nobody asked
        to hear of."""
        if event.get("type") == PROGRESS:
            address = self._address
            if address is None or not address.progress:
                return
        self.ring("change")

    def ring(self, kind: str) -> None:
        with self._lock:
            if self._target is None or self._sock is None:
                return
            self._n += 1
            data = bell.encode(bell.Ring(self.run_id, self.attempt, kind, self._n), self._token)
            try:
                self._sock.sendto(data, self._target)
            except OSError:
                pass  # nobody listens there (yet): the controller's pull covers it

    def _start_beating(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._beat, name="corral-bell", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self._beat_s):
            self.ring("beat")

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            self._target = None
