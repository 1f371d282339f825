"""The fake RunPod's pod log stream (``GET /v2/pods/{id}/logs``, ``shared/providers/runpod.md``
§5): Server-Sent Events, one event per line the pod's container printed, data
``{"source": "container", "line": "...", "ts": "..."}``.

The stream sends what the container has printed so far, then follows its output (new lines
as they come), with a keep-alive comment every ``keepalive_s``, and stays open
``hold_s`` (a stream that does not end by itself), or until the pod is deleted, the client
hangs up or the server closes. A test can make it less tidy, as the contract allows
(UNCONFIRMED): ``noise`` (raw bytes sent after what was printed so far: comments, non-JSON
data lines, other event types...), ``newline`` (``\\r\\n`` or ``\\r`` instead of ``\\n``),
``cut`` (the connection dropped after what was printed so far, mid-stream), ``drip`` (bytes
sent one at a time all along, never a line end).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any


@dataclass
class LogStream:
    hold_s: float = 30.0
    keepalive_s: float = 0.5
    newline: bytes = b"\n"
    noise: list[bytes] = field(default_factory=list)
    cut: bool = False
    #: sent a byte at a time, one per poll, after what was printed so far: a stream that
    #: sends all along and never ends a line
    drip: bytes = b""
    poll_s: float = 0.05
    #: set when the server closes: every open stream ends
    closing: threading.Event = field(default_factory=threading.Event)

    def serve(
        self, h: BaseHTTPRequestHandler, path: Path | None, headers: dict[str, str], alive: Any
    ) -> None:
        """Stream ``path`` (the container's output; None or absent: nothing yet) while
        ``alive()`` (the pod exists)."""
        h.send_response(200)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.close_connection = True
        nl = self.newline
        tail = _Tail(path)
        try:
            self._chunk(h, b": connected" + nl + nl)
            self._lines(h, tail.read())
            for raw in self.noise:
                self._chunk(h, raw)
            if self.cut:
                return  # no last chunk: the connection just drops
            end = time.monotonic() + self.hold_s
            beat = time.monotonic() + self.keepalive_s
            while time.monotonic() < end and alive() and not self.closing.is_set():
                time.sleep(self.poll_s)
                self._lines(h, tail.read())
                if self.drip:
                    self._chunk(h, self.drip[:1])
                    self.drip = self.drip[1:] + self.drip[:1]
                if time.monotonic() >= beat:
                    self._chunk(h, b": keep-alive" + nl + nl)
                    beat = time.monotonic() + self.keepalive_s
            self._lines(h, tail.read(final=True))
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up: that is how a reader of a stream that follows ends

    def _lines(self, h: BaseHTTPRequestHandler, lines: list[str]) -> None:
        nl = self.newline
        for line in lines:
            ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            entry = {"source": "container", "line": line, "ts": ts}
            self._chunk(h, b"data: " + json.dumps(entry).encode() + nl + nl)

    @staticmethod
    def _chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()


class _Tail:
    """The complete lines a growing file gained since the last read."""

    def __init__(self, path: Path | None):
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self, *, final: bool = False) -> list[str]:
        if self.path is None or not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        if final and self.partial:
            lines, self.partial = [*lines, self.partial], b""
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]
