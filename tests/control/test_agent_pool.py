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
