"""The controller's bell (:mod:`corral.wire.bell`): agents ring it when something happens, so
a quiet run is pulled rarely and a change is still acted on at once.

:class:`Bell` reads rings on one UDP socket, on a thread of its own: each ring is checked
against the attempt's agent token (derived, as for the agent's API, and kept per attempt),
``hello`` and ``change`` make the run due at once (``on_ring``), and every ring marks the
attempt's bell as heard. A run whose current attempt was heard within
:data:`corral.wire.bell.SILENT_AFTER_S` is *belled* (:meth:`Bell.belled`): the schedule
pulls it every ``Settings.quiet_poll_s`` instead of every ``Settings.poll_interval_s``, and
the preemption watcher asks the provider about its machine as rarely. A bell that goes silent
(:meth:`Bell.silent`: the machine or the agent is gone, or rings are lost on the way) makes
the run due at once and it is pulled at its usual pace again, so nothing is ever left to a
datagram alone.

Where the agents cannot reach the controller (a laptop behind NAT and a cloud machine) no ring
ever arrives and every run is pulled as without a bell. ``CORRAL_BELL``: the address to listen
on (``host:port``; default ``127.0.0.1:0``, a free port: enough for agents on this machine),
``off`` for no bell; ``CORRAL_BELL_ADVERTISE``: the ``host:port`` agents are told to ring when
it differs (a NAT, ``0.0.0.0`` bound). ``CORRAL_QUIET_POLL_INTERVAL``: seconds between two
pulls of a belled quiet run (default ``Settings.quiet_poll_s``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from corral.control.context import interval_env, log
from corral.control.lock import running_pid
from corral.control.tokens import agent_token
from corral.errors import ControllerError
from corral.files import write_json_atomic
from corral.wire import bell

ENV_BELL = "CORRAL_BELL"
ENV_ADVERTISE = "CORRAL_BELL_ADVERTISE"
ENV_QUIET_POLL = "CORRAL_QUIET_POLL_INTERVAL"
DEFAULT_BIND = "127.0.0.1:0"
#: rings read in one go before the callers are told (a burst costs one wake-up)
BATCH = 256
#: where the controller serving a home says which bell its agents ring (``{"pid", "bell"}``),
#: so that a launch made by another process of the home (``corral launch``) names it to the
#: agents it starts (``wire.bell.ENV_AGENT_BELL``)
BELL_FILE = "controller.bell.json"


def publish(home: Path, header: str) -> None:
    """Say that this process, the controller of ``home``, listens on the bell ``header``."""
    write_json_atomic(home / BELL_FILE, {"pid": os.getpid(), "bell": header}, mode=0o600)


def published(home: Path) -> str | None:
    """The bell of the controller serving ``home`` now (None: none serves it, or it has no
    bell: what a controller gone or one with ``CORRAL_BELL=off`` left behind is not it)."""
    try:
        data = json.loads((home / BELL_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("pid") != running_pid(home):
        return None
    bell = data.get("bell")
    return bell if isinstance(bell, str) and bell else None


def _address(name: str, raw: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ControllerError(f"{name}={raw!r}: expected host:port (or off)")
    return host, int(port)


def bell_settings(
    environ: Mapping[str, str] | None = None,
) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """``(bind, advertise)`` from the environment; bind None: no bell (``CORRAL_BELL=off``).
    ControllerError names a bad value."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_BELL, "").strip() or DEFAULT_BIND
    if raw.lower() in ("off", "none", "0"):
        return None, None
    bind = _address(ENV_BELL, raw)
    shown = env.get(ENV_ADVERTISE, "").strip()
    advertise = _address(ENV_ADVERTISE, shown) if shown else None
    if advertise is not None and advertise[1] == 0:
        raise ControllerError(f"{ENV_ADVERTISE}={shown!r}: expected a port other than 0")
    return bind, advertise


def quiet_poll_default(environ: Mapping[str, str] | None = None) -> float | None:
    """``CORRAL_QUIET_POLL_INTERVAL`` in seconds (None: unset); ControllerError on a bad one."""
    return interval_env(ENV_QUIET_POLL, environ)


class Bell:
    """The UDP socket agents ring, and which attempts were heard when.

    ``on_ring(run_ids)``: called from the bell's thread with the runs that rang ``hello`` or
    ``change`` (look at them now). ``token``: the agent token of an attempt (injected in
    tests)."""

    def __init__(
        self,
        home: Path,
        on_ring: Callable[[list[str]], None],
        *,
        bind: tuple[str, int] = ("127.0.0.1", 0),
        advertise: tuple[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        token: Callable[[str, int], str] | None = None,
    ):
        self._home = home
        self._on_ring = on_ring
        self._clock = clock
        self._token = token or (lambda run_id, attempt: agent_token(run_id, attempt, home))
        #: (run id, attempt) -> its agent token, derived once
        self._tokens: dict[tuple[str, int], str] = {}
        #: run id -> (the newest attempt heard, monotonic time it was last heard)
        self._heard: dict[str, tuple[int, float]] = {}
        #: runs reported silent (not reported again until heard anew)
        self._silenced: set[str] = set()
        family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.bind(bind)
        self._sock.settimeout(0.5)
        host, port = self._sock.getsockname()[:2]
        self.address = bell.BellAddress(*(advertise or (str(host), int(port))))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="corral-bell", daemon=True)
        #: rings taken (for the benchmark and tests): genuine ones, and refused ones
        self.rings = 0
        self.refused = 0

    def start(self) -> Bell:
        self._thread.start()
        log.info("bell listening on %s (udp)", self.address.header())
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._sock.close()

    def header(self) -> str:
        """What every request to an agent carries (:data:`corral.wire.bell.HEADER`)."""
        return self.address.header()

    def belled(self, run_id: str, attempt: int | None) -> bool:
        """Whether ``run_id``'s attempt ``attempt`` rang within the silence limit."""
        heard = self._heard.get(run_id)
        if heard is None or attempt is None or heard[0] != attempt:
            return False
        return self._clock() - heard[1] < bell.SILENT_AFTER_S

    def silent(self) -> list[str]:
        """Runs whose bell was heard and is silent now (each reported once, until heard
        again)."""
        limit = self._clock() - bell.SILENT_AFTER_S
        out = [
            rid
            for rid, (_, at) in list(self._heard.items())
            if at < limit and rid not in self._silenced
        ]
        self._silenced.update(out)
        return out

    def forget(self, run_id: str) -> None:
        """The run is over for this controller."""
        self._heard.pop(run_id, None)
        self._silenced.discard(run_id)
        for key in [k for k in self._tokens if k[0] == run_id]:
            del self._tokens[key]

    def _serve(self) -> None:
        while not self._stop.is_set():
            due: list[str] = []
            try:
                data = self._sock.recv(bell.MAX_RING)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            self._take(data, due)
            self._sock.setblocking(False)
            try:
                for _ in range(BATCH - 1):
                    self._take(self._sock.recv(bell.MAX_RING), due)
            except (BlockingIOError, OSError):
                pass
            finally:
                self._sock.settimeout(0.5)
            if due:
                try:
                    self._on_ring(due)
                except Exception as e:  # never lose the bell to a caller's bug
                    log.error("bell: %s", e)

    def _take(self, data: bytes, due: list[str]) -> None:
        ring = bell.peek(data)
        if ring is None:
            self.refused += 1
            return
        key = (ring.run_id, ring.attempt)
        token = self._tokens.get(key)
        if token is None:
            try:
                token = self._token(*key)
            except Exception:
                self.refused += 1
                return
        if not bell.genuine(data, ring, token):
            self.refused += 1
            return
        self._tokens[key] = token
        heard = self._heard.get(ring.run_id)
        if heard is not None and heard[0] > ring.attempt:
            return  # an earlier attempt's agent, still winding down
        self.rings += 1
        self._heard[ring.run_id] = (ring.attempt, self._clock())
        self._silenced.discard(ring.run_id)
        if ring.kind != "beat":
            due.append(ring.run_id)
