"""A real uvicorn on loopback serving ``create_app()`` for the test's CORRAL_HOME, and
tokens to call it with."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from corral.server.app import create_app
from corral.service.tokens import create_token
from support.waiting import wait_until


@dataclass(frozen=True)
class Api:
    """The running server's base URL and a writer's and a reader's token."""

    url: str
    token: str
    read_only_token: str

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(app: object) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread until the generator is closed."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 20, message="uvicorn to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def api(corral_home: Path) -> Iterator[Api]:
    writer = create_token("test-writer").token
    reader = create_token("test-reader", read_only=True).token
    for url in serve(create_app()):
        yield Api(url=url, token=writer, read_only_token=reader)
