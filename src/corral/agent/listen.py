"""The agent's listening socket, bound before the job starts and served once it runs.

Only :mod:`socket` is needed here: the agent binds its address first (a port that is taken
fails the start with nothing run), starts the job, and only then imports and builds its
HTTP server around this socket (:class:`corral.agent.server.AgentServer`). Connections that
arrive in between wait in the socket's backlog and are answered once the server serves.
"""

from __future__ import annotations

import contextlib
import errno
import socket

#: what binding "::" fails with on a node whose kernel has no IPv6
NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT})

#: connections the kernel holds for the server before it accepts them (the standard
#: library's ``socketserver`` default)
BACKLOG = 5


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: one the system picks).

    An IPv6 host (``::``, ``[::1]``) binds dual-stack where the system allows it, so the API
    answers on IPv4 and IPv6 alike (some container gateways reach a container over IPv6
    only); on a node without IPv6, ``::`` falls back to every IPv4 interface. Raises
    :class:`OSError` as ``bind`` does (the port is taken, the address is not this node's)."""
    host = host.strip("[]")
    if ":" in host:
        try:
            return _bound(socket.AF_INET6, host, port)
        except OSError as exc:  # a node without IPv6: every IPv4 interface instead
            if exc.errno not in NO_IPV6 or host != "::":
                raise
        host = "0.0.0.0"
    return _bound(socket.AF_INET, host, port)


def _bound(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock
