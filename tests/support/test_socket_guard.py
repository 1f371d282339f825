"""The socket guard (support/socket_guard, loaded for every test by tests/conftest.py): loopback
and Unix sockets work as ever; anything past loopback is refused before a packet leaves, and the
test that tried fails even when its code caught the error."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import socket_guard
from support.socket_guard import BeyondLoopback, is_loopback

#: TEST-NET-1 (RFC 5737): documentation addresses, routed nowhere
AWAY = ("192.0.2.1", 9)


def test_loopback_names_and_addresses_are_told_from_the_rest() -> None:
    here = ("localhost", "LOCALHOST", "127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1")
    for host in (*here, "0.0.0.0", "::"):  # a connect to the unspecified address stays here
        assert is_loopback(host), host
    for host in ("192.0.2.1", "10.0.0.1", "::ffff:10.0.0.1", "example.com", "localhost.example"):
        assert not is_loopback(host), host


def test_loopback_and_unix_sockets_work(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        for host in ("127.0.0.1", "localhost"):
            with socket.create_connection((host, port), timeout=5):
                pass
        with socket.socket() as raw:
            assert raw.connect_ex(("127.0.0.1", port)) == 0
    if socket.has_ipv6:
        try:
            six = socket.create_server(("::1", 0), family=socket.AF_INET6)
        except OSError:
            six = None  # no IPv6 loopback on this machine
        if six is not None:
            with six, socket.create_connection(("::1", six.getsockname()[1]), timeout=5):
                pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        assert udp.sendto(b"x", udp.getsockname()) == 1
        assert udp.recv(1) == b"x"
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
    assert socket.getaddrinfo("localhost", 80) and socket.getaddrinfo(None, 80)
    assert socket_guard.take() == []


def test_reaching_past_loopback_is_refused_and_recorded() -> None:
    with pytest.raises(BeyondLoopback, match=r"connect to \('192.0.2.1', 9\) refused"):
        socket.create_connection(AWAY, timeout=1)
    with socket.socket() as raw, pytest.raises(BeyondLoopback):
        raw.connect_ex(AWAY)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, pytest.raises(BeyondLoopback):
        udp.sendto(b"x", AWAY)
    with pytest.raises(BeyondLoopback, match=r"looking up 'example\.com'"):
        socket.getaddrinfo("example.com", 443)
    assert socket_guard.take() == [
        "connect to ('192.0.2.1', 9)",
        "connect to ('192.0.2.1', 9)",
        "sendto to ('192.0.2.1', 9)",
        "looking up 'example.com'",
    ]  # taken: this test, which meant to, passes


def test_a_test_that_reaches_past_loopback_fails_even_when_its_code_catches_the_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            """
            import socket

            def test_swallows_the_error():
                try:
                    socket.create_connection(("192.0.2.1", 9), timeout=1)
                except OSError:
                    pass

            def test_stays_home():
                with socket.create_server(("127.0.0.1", 0)) as server:
                    socket.create_connection(server.getsockname(), timeout=5).close()
            """
        )
    )
    tests = str(Path(__file__).parent.parent)  # where support/ is
    env = {
        **os.environ,
        "PYTHONPATH": tests,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "COLUMNS": "300",
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "support.socket_guard", "-q", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "test_swallows_the_error - Failed: the test reached beyond loopback" in done.stdout
    assert "connect to ('192.0.2.1', 9)" in done.stdout
