"""Raw HTTP/1.1 over a socket, for requests no client library sends (unknown methods, lying
``Content-Length`` headers, bodies that never arrive), each answer read within a deadline."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    seconds: float  # from the first byte sent to the whole answer read

    def json(self) -> Any:
        return json.loads(self.body)


class NoAnswer(AssertionError):
    """The server did not answer in time (or closed the connection without answering)."""


def _head_and_rest(sock: socket.socket, deadline: float) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise NoAnswer(f"no answer head within the deadline; got {data[:200]!r}") from None
        if not chunk:
            raise NoAnswer(f"connection closed before an answer; got {data[:200]!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def exchange(port: int, request: bytes, *, timeout: float = 5.0, head_only: bool = False) -> Answer:
    """Send ``request`` as is to 127.0.0.1:``port`` and read one answer within ``timeout``
    seconds (its body by its ``Content-Length``; none with ``head_only``, for HEAD)."""
    start = time.monotonic()
    deadline = start + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        head, body = _head_and_rest(sock, deadline)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = 0 if head_only else int(headers.get("content-length", "0"))
        while len(body) < length:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise NoAnswer(f"answer body incomplete: {len(body)} of {length}") from None
            if not chunk:
                break
            body += chunk
    return Answer(status, headers, body[:length], time.monotonic() - start)


def request_bytes(
    method: str,
    path: str,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    content_length: str | None = None,
) -> bytes:
    """One request; ``content_length`` overrides the header (``None``: the body's length,
    if there is a body)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: agent", "Connection: close"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if content_length is not None:
        lines.append(f"Content-Length: {content_length}")
    elif body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + body
