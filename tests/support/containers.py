"""Containers of fake clouds, run as processes on this machine.

A fake cloud's "container" is its command run in a root directory of its own, standing for
its "/" (``<root>/fs``, passed as ``CORRAL_NODE_ROOT``: the agent puts every path of its plan
under it), with a fresh environment (:func:`corral.providers.common.node.node_env`: ``HOME``
and ``TMPDIR`` inside that root, a ``CORRAL_HOME`` of its own, ``PYTHONPATH`` when the test has
one, so the container's python imports the corral under test as an image would have it):
it sees none of the test's files unless they travel the way they would on the cloud. Where
this machine allows it (root, ``unshare``), the container runs in a mount namespace of its own
that shows ``<root>`` at ``/mnt`` (:class:`corral.providers.common.node.NodeView`): every
container's "/" is ``/mnt/fs``, the same absolute paths on every node, as on a real cloud, and
the directory of the containers beside it (``<root>/..``) holds its own alone. A
container that is killed (its node went away) loses its files. One host runs many containers,
so each gets a free local port for its HTTP server, passed as ``CORRAL_AGENT_BIND`` (a real
container has its own network namespace).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psutil

AGENT_BIND = "CORRAL_AGENT_BIND"
NODE_ROOT = "CORRAL_NODE_ROOT"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(proc: subprocess.Popen | None) -> list[psutil.Process]:
    if proc is None or proc.poll() is not None:
        return []
    try:
        root = psutil.Process(proc.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal(procs: list[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


class Container:
    """One container start: ``argv`` with ``env`` in ``root``, its HTTP server on ``port``."""

    def __init__(self, argv: list[str], env: dict[str, str], root: Path, *, http: bool = True):
        from corral.providers.common.node import NodeView

        self.root = Path(root)
        self.fs = self.root / "fs"  # the container's own "/" (CORRAL_NODE_ROOT)
        self.fs.mkdir(parents=True, exist_ok=True)
        self.node = NodeView(self.root, hide=self.root.parent)  # no other container's files
        self.argv = self.node.argv(list(argv))
        self.port = free_port() if http else None
        base = self.node.env()
        base["PATH"] = os.path.dirname(sys.executable) + os.pathsep + base.get("PATH", "")
        base[NODE_ROOT] = self.node.root
        self.env = {**base, **env}
        if self.port is not None:
            self.env[AGENT_BIND] = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self._timers: list[threading.Timer] = []

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "container.log", "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        threading.Thread(target=self.proc.wait, daemon=True).start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log(self) -> str:
        try:
            return (self.root / "container.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, grace: float) -> None:
        """SIGTERM to the main process (like ``docker stop``), SIGKILL to all after ``grace``."""
        procs = _tree(self.proc)
        _signal(procs[:1], signal.SIGTERM)
        timer = threading.Timer(grace, _signal, (procs, signal.SIGKILL))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def kill(self) -> None:
        """SIGKILL to every process of the container at once (a node that went away): its
        files go with it."""
        _signal(_tree(self.proc), signal.SIGKILL)
        for timer in self._timers:
            timer.cancel()
        self.node.erase()


class Forwarder:
    """Forwards HTTP requests to a container's port (a gateway, a proxy)."""

    def __init__(self) -> None:
        self._client = httpx.Client(timeout=30.0)

    def forward(
        self, method: str, port: int, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, str] | None:
        """(status, body, content type), or None if the container did not answer."""
        keep = {k: v for k, v in headers.items() if k.lower() in ("authorization", "content-type")}
        try:
            resp = self._client.request(
                method, f"http://127.0.0.1:{port}{path}", content=body, headers=keep
            )
        except httpx.HTTPError:
            return None
        return resp.status_code, resp.content, resp.headers.get("Content-Type", "")

    def close(self) -> None:
        self._client.close()
