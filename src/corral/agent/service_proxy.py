"""A request forwarded to a service stage, streamed both ways (``docs/agent.md``, Services).

* The service's answer goes on as it arrives: with its ``Content-Length`` when the service
  gave one, else chunked, each piece flushed at once - server-sent events and token streams
  reach the caller as the service writes them, and an answer of any size passes.
* A request that asks to switch protocols (``Connection: upgrade``, websockets) becomes a byte
  tunnel between the caller and the service, until either side closes or both are quiet for
  :data:`TUNNEL_IDLE_S`.

The handler is the agent's ``BaseHTTPRequestHandler`` (its ``rfile``, ``wfile`` and socket).
Standard library only.
"""

from __future__ import annotations

import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler

#: the longest a forwarded request may wait for its answer, or between two pieces of it
FORWARD_TIMEOUT = 300.0
#: a tunnel (a websocket) with nothing sent either way for this long is closed
TUNNEL_IDLE_S = 3600.0
#: how long the caller's side of a tunnel may stay open after the service closed its own
TUNNEL_LINGER_S = 5.0
CHUNK = 64 * 1024
#: request headers never passed on (hop-by-hop, and how the agent itself was reached)
_HOP = {"connection", "keep-alive", "proxy-authorization", "te", "trailer", "host"}
_HOP |= {"transfer-encoding", "upgrade", "content-length", "proxy-connection"}
#: answer headers never passed on (the agent frames the answer itself)
_ANSWER_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "trailer"}


def wants_upgrade(headers: object) -> bool:
    """The request asks to switch protocols (a websocket handshake)."""
    get = getattr(headers, "get", None)
    if get is None:
        return False
    tokens = {t.strip().lower() for t in str(get("Connection", "")).split(",")}
    return "upgrade" in tokens and bool(get("Upgrade"))


def request_headers(
    pairs: list[tuple[str, str]], *, public: bool, prefix: str, tunnel: bool
) -> list[tuple[str, str]]:
    """The headers the service gets: the caller's, less the hop-by-hop ones (a tunnel keeps
    what the handshake needs) and, for a service behind the agent's token, that token;
    ``X-Forwarded-Prefix`` says where the service is mounted ("" at the root)."""
    keep_for_tunnel = {"connection", "upgrade", "content-length", "transfer-encoding"}
    out = []
    for name, value in pairs:
        low = name.lower()
        if low in _HOP and not (tunnel and low in keep_for_tunnel):
            continue
        if low == "authorization" and not public:
            continue
        if low.startswith("x-forwarded-"):
            continue  # the agent says where the request came from, nobody else
        out.append((name, value))
    if prefix:
        out.append(("X-Forwarded-Prefix", prefix))
    return out


def stream(
    handler: BaseHTTPRequestHandler,
    port: int,
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body: bytes,
) -> None:
    """Send the request to ``127.0.0.1:<port>`` and its answer back as it comes. Raises
    OSError (or ``http.client.HTTPException``) only before anything was sent back: the
    caller answers 502 then."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=FORWARD_TIMEOUT)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"127.0.0.1:{port}")
        for name, value in headers:
            conn.putheader(name, value)
        if body or method in ("POST", "PUT", "PATCH"):
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        resp = conn.getresponse()
        _answer(handler, resp, head_only=method == "HEAD")
    finally:
        conn.close()


def _answer(handler: BaseHTTPRequestHandler, resp: http.client.HTTPResponse, head_only: bool):
    status = resp.status
    length = resp.getheader("Content-Length")
    sized = length is not None and length.strip().isdigit()
    bodyless = head_only or status in (204, 304) or 100 <= status < 200
    old_client = handler.request_version != "HTTP/1.1"
    handler.send_response(status)
    for name, value in resp.getheaders():
        if name.lower() not in _ANSWER_HOP:
            handler.send_header(name, value)
    if sized and (not bodyless or head_only):
        handler.send_header("Content-Length", str(length).strip())
    chunked = not bodyless and not sized and not old_client
    if chunked:
        handler.send_header("Transfer-Encoding", "chunked")
    elif not bodyless and not sized:  # an HTTP/1.0 caller: the end of the body is the close
        handler.close_connection = True
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.flush()
    if bodyless:
        return
    try:
        while piece := resp.read1(CHUNK):
            if chunked:
                handler.wfile.write(b"%x\r\n%b\r\n" % (len(piece), piece))
            else:
                handler.wfile.write(piece)
            handler.wfile.flush()
        if chunked:
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
    except (OSError, http.client.HTTPException):
        # the caller left, or the service broke off: the answer cannot be finished, and the
        # connection carries nothing after it
        handler.close_connection = True


def tunnel(
    handler: BaseHTTPRequestHandler,
    port: int,
    method: str,
    path: str,
    headers: list[tuple[str, str]],
) -> None:
    """Hand the request to ``127.0.0.1:<port>`` as it came and pass bytes both ways until
    either side closes (the service's own answer, 101 or not, goes back as it is). Raises
    OSError only when the service cannot be reached (nothing was sent back yet)."""
    upstream = socket.create_connection(("127.0.0.1", port), timeout=FORWARD_TIMEOUT)
    handler.close_connection = True  # after a tunnel, the connection is done
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers) + "\r\n"
        upstream.sendall(head.encode("latin-1"))
        upstream.settimeout(TUNNEL_IDLE_S)
        client = handler.connection
        client.settimeout(TUNNEL_IDLE_S)
        handler.wfile.flush()
        inbound = threading.Thread(
            target=_pump_in, args=(handler, upstream), name="service-tunnel", daemon=True
        )
        inbound.start()
        try:
            while data := upstream.recv(CHUNK):
                client.sendall(data)
        except OSError:
            pass
        _shutdown(client, socket.SHUT_WR)
        inbound.join(TUNNEL_LINGER_S)
        if inbound.is_alive():  # the caller keeps its side open: end it
            _shutdown(client, socket.SHUT_RDWR)
            inbound.join(TUNNEL_LINGER_S)
    finally:
        upstream.close()


def _pump_in(handler: BaseHTTPRequestHandler, upstream: socket.socket) -> None:
    """The caller's bytes to the service (what the handler's reader holds already first)."""
    try:
        while data := handler.rfile.read1(CHUNK):
            upstream.sendall(data)
    except (OSError, ValueError):
        pass
    _shutdown(upstream, socket.SHUT_WR)


def _shutdown(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass
