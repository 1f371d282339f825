"""Agent tokens: derived, never stored.

The token that protects an attempt's agent API is ``HMAC-SHA256(key, "<run_id>:<attempt>")``
where ``key`` is a random 32-byte file under ``CORRAL_HOME`` (mode 0600, created on first use).
The CLI and every controller sharing that home derive the same token, so no token is written to
the store, an event or a log. Controllers on several machines sharing one store (each may take
over another's runs) share the key instead through ``CORRAL_AGENT_KEY`` (at least 32
characters, e.g. ``openssl rand -hex 32``), which wins over the file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from corral import paths
from corral.errors import BadInput

KEY_FILE = "agent.key"
ENV_AGENT_KEY = "CORRAL_AGENT_KEY"
MIN_KEY_CHARS = 32


def _key(home: Path | None = None) -> bytes:
    shared = os.environ.get(ENV_AGENT_KEY, "").strip()
    if shared:
        if len(shared) < MIN_KEY_CHARS:
            raise BadInput(
                f"{ENV_AGENT_KEY} must have at least {MIN_KEY_CHARS} characters "
                "(e.g. `openssl rand -hex 32`)"
            )
        return shared.encode()
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
