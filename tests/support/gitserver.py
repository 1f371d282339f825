"""Git repositories for tests: a bare repository with a few commits, and a loopback smart-HTTP
server (``git http-backend`` as CGI) that requires a bearer-like token as HTTP basic auth."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(root: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """A checkout at ``root/checkout`` with ``files`` committed on ``main`` and pushed to the
    bare ``root/repo.git``. Returns (bare, checkout)."""
    bare, checkout = root / "repo.git", root / "checkout"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("init", "-q", "-b", "main", str(checkout))
    commit(checkout, files, "first")
    git("remote", "add", "origin", str(bare), cwd=checkout)
    git("push", "-q", "origin", "main", cwd=checkout)
    return bare, checkout


def commit(checkout: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        path = checkout / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git("add", "-A", cwd=checkout)
    git("commit", "-q", "-m", message, cwd=checkout)
    return git("rev-parse", "HEAD", cwd=checkout)


class GitHttpServer:
    """``http://127.0.0.1:<port>/<name>.git`` for the bare repositories under ``root``; every
    request needs HTTP basic auth whose password is ``token``. ``seen_auth`` counts the
    requests that had it."""

    def __init__(self, root: Path, token: str):
        self.root = root
        self.token = token
        self.seen_auth = 0
        self.denied = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._cgi()

            def do_POST(self) -> None:
                self._cgi()

            def _cgi(self) -> None:
                auth = self.headers.get("Authorization", "")
                ok = False
                if auth.startswith("Basic "):
                    _user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    ok = password == server.token
                if not ok:
                    server.denied += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                server.seen_auth += 1
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                env = {
                    "PATH": os.environ.get("PATH", ""),
                    "GIT_PROJECT_ROOT": str(server.root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": url.path,
                    "QUERY_STRING": url.query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                    "REMOTE_USER": "t",
                }
                done = subprocess.run(
                    ["git", "http-backend"], input=body, env=env, capture_output=True
                )
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.decode().split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
