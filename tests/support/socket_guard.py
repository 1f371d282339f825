"""No test reaches past loopback: a pytest plugin (tests/conftest.py loads it) that fails any
test whose process connects, sends a datagram or looks up a name beyond this machine.

``socket.socket.connect``, ``connect_ex`` and ``sendto`` refuse an IPv4 or IPv6 address that is
not this machine's (127.0.0.0/8, ::1, ``localhost``, and 0.0.0.0 and ::, which a connect takes to
this machine); ``socket.getaddrinfo`` refuses any name but ``localhost`` (an address written
out is not looked up, so the connect that follows is what is judged). Unix sockets and binding
are never refused. A refusal raises :class:`BeyondLoopback` (an ``OSError``, "network
unreachable", so the code under test sees a network failure) and is recorded: the test fails
at the end of the phase (setup, call or teardown) where it happened even when the code caught
the error. A test of the guard itself reads and clears the record with :func:`take`.

It guards the test process (and its threads); processes a test starts are not guarded.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
from collections.abc import Generator
from typing import Any

import pytest

#: names that resolve to this machine without asking a DNS server (/etc/hosts)
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost", "ip6-loopback"})

_INET = (socket.AF_INET, socket.AF_INET6)
_lock = threading.Lock()
_reached: list[str] = []
_real: dict[str, Any] = {}


class BeyondLoopback(OSError):
    """A test's process tried to reach past loopback (always a defect of the test)."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.ENETUNREACH, f"the test suite stays on loopback: {what} refused")


def is_loopback(host: str | bytes) -> bool:
    """Whether ``host`` (a name or an address, as a socket call takes it) is this machine's
    loopback: ``localhost``, 127.0.0.0/8, ::1 or an IPv4-mapped loopback address, or the
    unspecified address (0.0.0.0, ::), which a connect on Linux takes to this machine too."""
    name = host.decode() if isinstance(host, bytes) else host
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _refuse(what: str) -> BeyondLoopback:
    with _lock:
        _reached.append(what)
    return BeyondLoopback(what)


def _check_address(sock: socket.socket, address: Any, call: str) -> None:
    if sock.family in _INET and isinstance(address, tuple) and not is_loopback(address[0]):
        raise _refuse(f"{call} to {address[:2]!r}")


def _connect(self: socket.socket, address: Any) -> None:
    _check_address(self, address, "connect")
    return _real["connect"](self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(self, address, "connect")
    return int(_real["connect_ex"](self, address))


def _sendto(self: socket.socket, data: Any, *args: Any) -> int:
    _check_address(self, args[-1] if args else None, "sendto")
    return int(_real["sendto"](self, data, *args))


def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host not in (None, "", b""):
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not is_loopback(name):
            try:
                ipaddress.ip_address(name.split("%", 1)[0])
            except ValueError:
                raise _refuse(f"looking up {name!r}") from None
    return _real["getaddrinfo"](host, *args, **kwargs)


def install() -> None:
    """Guard this process (idempotent)."""
    if _real:
        return
    _real.update(
        connect=socket.socket.connect,
        connect_ex=socket.socket.connect_ex,
        sendto=socket.socket.sendto,
        getaddrinfo=socket.getaddrinfo,
    )
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    socket.socket.sendto = _sendto  # type: ignore[assignment,method-assign]
    socket.getaddrinfo = _getaddrinfo


def uninstall() -> None:
    """Put the socket module back as it was."""
    if not _real:
        return
    socket.socket.connect = _real["connect"]  # type: ignore[method-assign]
    socket.socket.connect_ex = _real["connect_ex"]  # type: ignore[method-assign]
    socket.socket.sendto = _real["sendto"]  # type: ignore[method-assign]
    socket.getaddrinfo = _real["getaddrinfo"]
    _real.clear()


def take() -> list[str]:
    """What was refused since the last call, oldest first; the record is emptied."""
    with _lock:
        reached = list(_reached)
        _reached.clear()
    return reached


def pytest_configure(config: pytest.Config) -> None:
    install()


def pytest_unconfigure(config: pytest.Config) -> None:
    uninstall()


def _phase() -> Generator[None, Any, Any]:
    try:
        return (yield)
    finally:
        reached = take()
        if reached:
            pytest.fail(
                "the test reached beyond loopback (the suite stays on this machine): "
                + "; ".join(reached),
                pytrace=False,
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, Any, Any]:
    return (yield from _phase())
