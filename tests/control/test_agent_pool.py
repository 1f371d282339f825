"""The controller calls every agent through one shared connection pool: a run's client is an
endpoint and a token, and finishing a run never closes the pool the other runs use."""

from __future__ import annotations

import gc
import tracemalloc

import httpx

from corral.control.agent_client import AgentClient, AgentPool
from corral.control.context import Context
from corral.control.tokens import agent_token
from corral.store.store import Store


def _context(seen: list[tuple[str, str]]) -> Context:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers["Authorization"]))
        return httpx.Response(200, json={"ok": True, "host": request.url.host})

    pool = AgentPool(httpx.Client(transport=httpx.MockTransport(answer)))
    return Context(store=Store.open(), providers={}, pool=pool)


def test_every_run_borrows_the_one_pool_and_finishing_a_run_leaves_it_open():
    seen: list[tuple[str, str]] = []
    ctx = _context(seen)
    pool = ctx.pool
    a = ctx.agent("run-a", 1, "http://agent-a:8000")
    b = ctx.agent("run-b", 2, "http://agent-b:8000")
    assert ctx.agent("run-a", 1, "http://agent-a:8000") is a  # one client per attempt
    assert a.health()["host"] == "agent-a" and b.health()["host"] == "agent-b"
    # each agent gets its own attempt's token over the shared client
    assert seen == [
        ("agent-a", f"Bearer {agent_token('run-a', 1, ctx.home)}"),
        ("agent-b", f"Bearer {agent_token('run-b', 2, ctx.home)}"),
    ]
    ctx.forget("run-a")
    assert ctx.pool is pool and not pool.closed
    assert b.health()["host"] == "agent-b"  # the other run still polls
    assert ctx.agent("run-a", 1, "http://agent-a:8000") is not a  # a fresh client after forget
    ctx.close()
    assert pool.closed and ctx.pool is None


def test_a_client_that_owns_its_connection_closes_it_and_a_borrowing_one_does_not():
    own = AgentClient("http://agent:8000", "t")
    own.close()
    assert own._client.is_closed
    shared = httpx.Client()
    borrowing = AgentClient("http://agent:8000", "t", client=shared)
    borrowing.close()
    assert not shared.is_closed
    shared.close()


def test_two_hundred_agent_clients_of_the_pool_hold_a_few_hundred_bytes_each():
    pool = AgentPool()
    try:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            clients = [
                pool.client(f"http://10.0.0.{i % 250}:{8000 + i}", f"t{i:032d}") for i in range(200)
            ]
            gc.collect()
            per_client = (tracemalloc.get_traced_memory()[0] - before) / len(clients)
        finally:
            tracemalloc.stop()
    finally:
        pool.close()
    # one httpx.Client per run held ~3.6 KiB of Python objects here (and ~830 KiB of RSS in
    # OpenSSL contexts, which tracemalloc does not see); a borrowing client is ~0.5 KiB
    assert per_client < 1024, per_client


def _server(handler_cls):  # type: ignore[no-untyped-def]
    import threading
    from http.server import ThreadingHTTPServer

    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def test_the_default_pool_keeps_connections_alive_and_retries_one_the_agent_closed():
    """The lean transport (http.client): one connection serves many requests; a kept
    connection the agent closed meanwhile is replaced and the request sent again once."""
    import json
    import socket
    from http.server import BaseHTTPRequestHandler

    from corral.control.agent_client import LeanTransport

    conns: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            """No access log on the test's stderr."""

        def setup(self) -> None:
            super().setup()
            conns.append(id(self.connection))

        def do_GET(self) -> None:
            body = json.dumps({"ok": True, "path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if self.path.startswith("/drop"):  # keep-alive promised, then closed anyway
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

    srv, url = _server(Handler)
    pool = AgentPool()
    try:
        assert isinstance(pool._http, LeanTransport)
        client = pool.client(url, "t")
        for _ in range(5):
            assert client.health()["ok"] is True
        assert len(conns) == 1  # kept alive
        assert client._request("GET", "/drop")["path"] == "/drop"
        assert client.health()["path"] == "/health"  # on a new connection, no error
        assert len(conns) == 2
    finally:
        pool.close()
        srv.shutdown()


def test_kept_connections_no_longer_answered_are_all_dropped_and_the_request_sent_anew():
    """A node's next attempt serves its address (a gang's hand-over), and the ended attempt's
    server closes every connection kept from before unanswered: the first request that finds
    one stale drops them all and is sent once more on a new connection, answered by what
    serves now (not on another stale one: unreachable)."""
    import json
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from http.server import BaseHTTPRequestHandler

    together = threading.Barrier(3, timeout=10)
    stale: set[int] = set()  # the connections of the ended attempt's server
    answered: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            """No access log on the test's stderr."""

        def do_GET(self) -> None:
            if id(self.connection) in stale:
                self.close_connection = True  # closed unanswered
                return
            if self.path == "/together":
                together.wait()  # three requests at once: three connections kept
            answered.append(id(self.connection))
            body = json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv, url = _server(Handler)
    pool = AgentPool()
    try:
        client = pool.client(url, "t")
        with ThreadPoolExecutor(3) as threads:
            list(threads.map(lambda _: client._request("GET", "/together"), range(3)))
        stale.update(answered)  # the next attempt serves from now on
        assert len(stale) == 3
        assert client.health()["ok"] is True
        assert client.health()["ok"] is True  # kept: the new one
        assert len(set(answered) - stale) == 1
    finally:
        pool.close()
        srv.shutdown()


def test_an_agent_that_does_not_answer_in_time_or_at_all_is_unreachable(monkeypatch):
    import socket
    import time as _time
    from http.server import BaseHTTPRequestHandler

    import pytest

    from corral.errors import AgentUnreachable

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            """No access log on the test's stderr."""

        def do_GET(self) -> None:
            _time.sleep(1.0)

    srv, url = _server(Slow)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    pool = AgentPool(timeout=0.2)
    try:
        with pytest.raises(AgentUnreachable, match="timed out on /status"):
            pool.client(url, "t").status()
        with pytest.raises(AgentUnreachable, match="unreachable: ConnectionRefusedError"):
            pool.client(dead, "t").status()
    finally:
        pool.close()
        srv.shutdown()


def test_with_a_proxy_in_the_environment_the_pool_uses_httpx(monkeypatch):
    from corral.control.agent_client import HttpxTransport

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    pool = AgentPool()
    try:
        assert isinstance(pool._http, HttpxTransport)
    finally:
        pool.close()
