"""The encryption keys of the secret store: ``CORRAL_SECRET_KEY`` or ``CORRAL_HOME/secret.key``.

Either source holds one or more Fernet keys, the first being the one new values are encrypted
with; every key in the list decrypts (``MultiFernet``), which is what makes rotation safe:
``CORRAL_SECRET_KEY`` separates keys with commas, the key file puts one per line.

The key file is created on first use with mode 0600 (atomically: it appears complete or not
at all, and two processes racing to create it end up with the same key). A key file that
others may read is refused: chmod 600 it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from corral.errors import BadInput

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

ENV_SECRET_KEY = "CORRAL_SECRET_KEY"
KEY_FILE = "secret.key"


class SecretKeyError(BadInput):
    """The secret key is missing, malformed, unsafe, or does not decrypt the store."""

    code = "secret_key"


def write_private(path: Path, data: bytes, *, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` with mode 0600, atomically (a temporary file, fsync, then a
    rename). With ``exclusive`` the file is only created if it does not exist yet (a hard link
    instead of the rename); returns False when it already existed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask says
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
    finally:
        if exclusive:
            tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


def parse_keys(raw: str, source: str) -> list[bytes]:
    """The Fernet keys in ``raw`` (separated by commas or newlines), validated. Errors name
    the key by position only, never by value."""
    from cryptography.fernet import Fernet

    keys = [k.encode("ascii", "replace") for k in re.split(r"[,\s]+", raw.strip()) if k]
    if not keys:
        raise SecretKeyError(f"{source} holds no key")
    for i, key in enumerate(keys, 1):
        try:
            Fernet(key)
        except ValueError:
            raise SecretKeyError(
                f"{source}: key #{i} is not a valid Fernet key (32 url-safe base64-encoded "
                "bytes; make one with `corral secret rotate` or Fernet.generate_key())"
            ) from None
    return keys


class KeyRing:
    """The keys for the secret store under ``home``: ``environ[CORRAL_SECRET_KEY]`` if set,
    else the key file."""

    def __init__(self, home: Path, environ: Mapping[str, str] | None = None):
        self.home = Path(home)
        self.path = self.home / KEY_FILE
        self._environ = os.environ if environ is None else environ

    @property
    def from_env(self) -> bool:
        return bool(self._environ.get(ENV_SECRET_KEY, "").strip())

    @property
    def source(self) -> str:
        return ENV_SECRET_KEY if self.from_env else str(self.path)

    def keys(self, *, create: bool = False) -> list[bytes]:
        """The keys, primary first; [] when there is none yet (a new key file with ``create``)."""
        if self.from_env:
            return parse_keys(self._environ[ENV_SECRET_KEY], ENV_SECRET_KEY)
        try:
            info = self.path.stat()
        except FileNotFoundError:
            if not create:
                return []
            return self._create()
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SecretKeyError(
                f"{self.path} can be read by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"run: chmod 600 {self.path}"
            )
        return parse_keys(self.path.read_text(encoding="ascii", errors="replace"), str(self.path))

    def fernet(self, *, create: bool = False) -> MultiFernet | None:
        from cryptography.fernet import Fernet, MultiFernet

        keys = self.keys(create=create)
        return MultiFernet([Fernet(k) for k in keys]) if keys else None

    def _create(self) -> list[bytes]:
        from cryptography.fernet import Fernet

        self.home.mkdir(parents=True, exist_ok=True)
        write_private(self.path, Fernet.generate_key() + b"\n", exclusive=True)
        return self.keys()  # ours, or the one a concurrent process created first

    def write(self, keys: list[bytes]) -> None:
        """Replace the key file with ``keys`` (primary first). Not for ``CORRAL_SECRET_KEY``."""
        if self.from_env:
            raise SecretKeyError(f"the keys come from {ENV_SECRET_KEY}: change it there")
        self.home.mkdir(parents=True, exist_ok=True)
        write_private(self.path, b"".join(k + b"\n" for k in keys))
