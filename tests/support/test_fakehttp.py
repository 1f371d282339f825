"""The fake clouds' shared HTTP pieces (support/fakehttp.py), on a real loopback server."""

from __future__ import annotations

import http.client
import json
import queue
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from support import fakehttp


class Fake:
    """Answers what the test set in ``reply``, or a fault queued for the route."""

    def __init__(self) -> None:
        self.faults: fakehttp.Faults[fakehttp.Fault] = fakehttp.Faults()
        self.reply: tuple[int, Any, str, fakehttp.ContentTypeRule] = (
            200,
            {"ok": True},
            "application/json",
            "always",
        )
        self.hang: threading.Event | None = None  # set: wait for it, then answer
        self.outcome: queue.Queue[BaseException | None] = queue.Queue()
        self.server = fakehttp.start_server(self)

    def handle(self, h: fakehttp.QuietHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        if length:
            h.rfile.read(length)
        route = f"{h.command} {h.path}"
        fault = self.faults.take(route)
        status, body, kind, rule = self.reply
        headers: dict[str, str] = {}
        if fault is not None:
            status, body, headers = fault.status, {"fault": fault.target}, fault.headers()
        if self.hang is not None:
            self.hang.wait(10)
            h.close_connection = True
        try:
            fakehttp.send(h, status, body, kind, headers, content_type=rule)
        except BaseException as exc:
            self.outcome.put(exc)
            raise
        self.outcome.put(None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[Fake]:
    server = Fake()
    yield server
    server.close()


def _conn(fake: Fake) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", fake.server.server_port, timeout=10)


def _get(conn: http.client.HTTPConnection, path: str = "/x", method: str = "GET") -> Any:
    conn.request(method, path)
    resp = conn.getresponse()
    return resp, resp.read()


def test_a_fault_answers_its_times_then_is_gone(fake):
    fault = fake.faults.add(fakehttp.Fault("GET /pods/*", 503, retry_after=2.5, times=2))
    conn = _conn(fake)
    resp, body = _get(conn, "/pods/a")
    assert resp.status == 503 and json.loads(body) == {"fault": "GET /pods/*"}
    assert resp.getheader("Retry-After") == "2.5"
    assert fault.times == 1
    resp, _ = _get(conn, "/other")  # no match: the fault is not spent
    assert resp.status == 200 and fault.times == 1
    assert _get(conn, "/pods/b")[0].status == 503
    resp, body = _get(conn, "/pods/c")
    assert resp.status == 200 and json.loads(body) == {"ok": True}
    assert resp.getheader("Retry-After") is None
    assert fault.times == 0 and fake.faults.take("GET /pods/d") is None
    conn.close()


def test_faults_match_in_order_and_without_retry_after_have_no_header():
    faults: fakehttp.Faults[fakehttp.Fault] = fakehttp.Faults()
    first = faults.add(fakehttp.Fault("POST /v2/*"))
    second = faults.add(fakehttp.Fault("POST /v2/pods", 429))
    assert faults.take("POST /v2/pods") is first
    assert faults.take("POST /v2/pods") is second
    assert faults.take("POST /v2/pods") is None
    assert faults.take("GET /v2/pods") is None  # fnmatch on the whole route, case and all
    assert first.headers() == {} and fakehttp.Fault("x", retry_after=1).headers() == {
        "Retry-After": "1"
    }


def test_a_reply_to_a_client_that_hung_up_does_not_raise(fake):
    fake.hang = threading.Event()
    fake.reply = (200, b"x" * (4 << 20), "application/octet-stream", "always")
    sock = socket.create_connection(("127.0.0.1", fake.server.server_port), timeout=10)
    sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    # a reset on close (linger 0): the answer meets a dead connection
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    fake.hang.set()
    assert fake.outcome.get(timeout=10) is None
    fake.hang = None
    resp, _ = _get(_conn(fake))  # and the server still answers
    assert resp.status == 200


@pytest.mark.parametrize(
    ("rule", "status", "body", "typed"),
    [
        ("always", 200, {"a": 1}, True),
        ("always", 200, None, True),
        ("always", 204, None, True),
        ("unless-204", 200, {"a": 1}, True),
        ("unless-204", 202, None, True),
        ("unless-204", 204, None, False),
        ("with-body", 200, {"a": 1}, True),
        ("with-body", 202, None, False),
        ("with-body", 204, None, False),
        ("with-body", 502, b"<html>bad gateway</html>", True),
    ],
)
def test_content_type_follows_the_rule(fake, rule, status, body, typed):
    kind = "text/html" if isinstance(body, bytes) else "application/json"
    fake.reply = (status, body, kind, rule)
    conn = _conn(fake)
    resp, data = _get(conn)
    assert resp.status == status
    assert resp.getheader("Content-Type") == (kind if typed else None)
    expected = fakehttp.encode(body) if status != 204 else b""
    assert data == expected and resp.getheader("Content-Length") == str(len(expected))
    conn.close()


@pytest.mark.parametrize("rule", ["always", "unless-204", "with-body"])
def test_a_204_carries_no_content_and_the_connection_stays_usable(fake, rule):
    fake.reply = (204, {"dropped": True}, "application/json", rule)
    conn = _conn(fake)
    resp, data = _get(conn, method="DELETE")
    assert resp.status == 204 and data == b"" and resp.getheader("Content-Length") == "0"
    fake.reply = (200, {"next": 1}, "application/json", rule)
    resp, data = _get(conn)  # the same connection: no stray bytes were left on it
    assert resp.status == 200 and json.loads(data) == {"next": 1}
    conn.close()


def test_encode():
    assert fakehttp.encode(b"raw") == b"raw"
    assert fakehttp.encode(None) == b""
    assert fakehttp.encode({"a": [1]}) == b'{"a": [1]}'


def test_the_handler_passes_its_methods_to_the_fake_and_logs_nothing(fake, capsys):
    conn = _conn(fake)
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        resp, data = _get(conn, method=method)
        assert resp.status == 200 and json.loads(data) == {"ok": True}
    resp, _ = _get(conn, method="HEAD")
    assert resp.status == 501  # not one of them: http.server's own answer
    conn.close()
    assert capsys.readouterr().err == ""


def test_sleeps_records_and_returns():
    sleeps = fakehttp.Sleeps()
    sleeps(2.0)
    sleeps(0.5)
    assert sleeps.calls == [2.0, 0.5]
