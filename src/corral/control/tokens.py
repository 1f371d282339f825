"""Agent tokens: derived, never stored.

The token that protects an attempt's agent API is ``HMAC-SHA256(key, "<run_id>:<attempt>")``
where ``key`` is a random 32-byte file under ``CORRAL_HOME`` (mode 0600, created on first use).
The CLI and every controller sharing that home derive the same token, so no token is written to
the store, an event or a log.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from corral import paths

KEY_FILE = "agent.key"


def _key(home: Path | None = None) -> bytes:
    path = (home or paths.home()) / KEY_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    data = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its key
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return data


def agent_token(run_id: str, attempt: int, home: Path | None = None) -> str:
    msg = f"{run_id}:{attempt}".encode()
    return hmac.new(_key(home), msg, hashlib.sha256).hexdigest()
