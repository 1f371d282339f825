"""The encrypted secret store: ``CORRAL_HOME/secrets.json`` (mode 0600).

Each value is a Fernet token (AES-128-CBC + HMAC-SHA256) made with the primary key of
:class:`~corral.secrets.keys.KeyRing`; names and dates are kept in the clear so that
``corral secret list`` needs no key. Every change rewrites the file atomically under a file
lock (``secrets.lock``), so concurrent CLIs and controllers never lose an update.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral import paths
from corral.errors import BadInput, StoreError
from corral.secrets.keys import KeyRing, SecretKeyError, write_private

STORE_FILE = "secrets.json"
LOCK_FILE = "secrets.lock"
NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
MAX_VALUE_BYTES = 64 * 1024
_FORMAT = 1


def check_name(name: object) -> str:
    """``name`` if it is a valid secret name. The error never echoes it: a mistyped name may
    be the value itself."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadInput(
            "invalid secret name: use upper-case letters, digits and '_', not starting with a "
            "digit (e.g. HF_TOKEN)"
        )
    return name


def check_value(value: str) -> str:
    if not value:
        raise BadInput("empty secret value: nothing saved")
    if "\0" in value:
        raise BadInput("a secret value cannot contain a NUL character (it goes into an env var)")
    if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
        raise BadInput(f"secret value too long (more than {MAX_VALUE_BYTES // 1024} KiB)")
    return value


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a secret: its name and dates, never its value."""

    name: str
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


class SecretStore:
    """Secrets of one ``CORRAL_HOME`` (default: the current one). ``environ`` is where
    ``CORRAL_SECRET_KEY`` is read from (default ``os.environ``); ``clock`` dates changes."""

    def __init__(
        self,
        home: Path | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Any = None,
    ):
        self.home = Path(home) if home is not None else paths.home()
        self.path = self.home / STORE_FILE
        self.keyring = KeyRing(self.home, environ)
        self._clock = clock or (lambda: datetime.now(UTC))

    # --- reading -----------------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(raw)
            entries = doc["secrets"]
            if not isinstance(entries, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise StoreError(f"{self.path} is not a corral secrets file") from None
        return entries

    def list(self) -> list[SecretInfo]:
        """Every secret's name and dates, sorted by name. Needs no key."""
        return [
            SecretInfo(
                name,
                datetime.fromisoformat(entry["created_at"]),
                datetime.fromisoformat(entry["updated_at"]),
            )
            for name, entry in sorted(self._load().items())
        ]

    def names(self) -> builtins.list[str]:  # `list` here is the method above
        return sorted(self._load())

    def get(self, name: str) -> str | None:
        """The value of ``name``, or None if the store has no such secret."""
        entry = self._load().get(check_name(name))
        if entry is None:
            return None
        return self._decrypt(name, entry["token"])

    def values(self) -> dict[str, str]:
        """Every secret's value (for redaction); {} when the store is empty."""
        entries = self._load()
        if not entries:
            return {}
        fernet = self.keyring.fernet()
        return {name: self._decrypt(name, e["token"], fernet) for name, e in entries.items()}

    def _decrypt(self, name: str, token: str, fernet: Any = None) -> str:
        from cryptography.fernet import InvalidToken

        fernet = fernet or self.keyring.fernet()
        if fernet is None:
            raise SecretKeyError(
                f"secret {name} cannot be decrypted: no key ({self.keyring.source} is missing)"
            )
        try:
            return fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError):
            raise SecretKeyError(
                f"secret {name} cannot be decrypted with the key(s) from {self.keyring.source} "
                "(a different key, or one rotated away?)"
            ) from None

    def fingerprint(self) -> tuple[str, int, int] | None:
        """Changes whenever the file does (for caches); None when there is no file."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (str(self.path), info.st_mtime_ns, info.st_size)

    # --- writing -----------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, str]]]:
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries = self._load()
            yield entries
        finally:
            os.close(fd)  # releases the lock

    def _save(self, entries: Mapping[str, Mapping[str, str]]) -> None:
        doc = {"format": _FORMAT, "secrets": dict(sorted(entries.items()))}
        write_private(self.path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"))

    def set(self, name: str, value: str) -> SecretInfo:
        """Encrypt and save ``value`` under ``name`` (created, or replaced)."""
        check_name(name)
        check_value(value)
        with self._locked() as entries:
            fernet = self.keyring.fernet(create=True)
            assert fernet is not None
            now = self._clock().astimezone(UTC).isoformat()
            old = entries.get(name)
            entries[name] = {
                "token": fernet.encrypt(value.encode("utf-8")).decode("ascii"),
                "created_at": old["created_at"] if old else now,
                "updated_at": now,
            }
            self._save(entries)
            entry = entries[name]
        return SecretInfo(
            name,
            datetime.fromisoformat(entry["created_at"]),
            datetime.fromisoformat(entry["updated_at"]),
        )

    def delete(self, name: str) -> bool:
        """Remove ``name``; False if there was no such secret."""
        check_name(name)
        with self._locked() as entries:
            if entries.pop(name, None) is None:
                return False
            self._save(entries)
        return True

    def rotate(self, *, drop_old: bool = False) -> int:
        """Re-encrypt every secret with a new primary key; returns how many.

        With the key file: a new key is put first (older keys stay after it, so anything
        still encrypted with them decrypts), then every value is re-encrypted with it; with
        ``drop_old`` the older keys are removed at the end. Each step is atomic and the order
        means a crash at any point leaves every value readable. With ``CORRAL_SECRET_KEY``
        the values are re-encrypted with its first key (put the new key first there yourself,
        and remove the old one once this has run)."""
        from cryptography.fernet import Fernet, MultiFernet

        with self._locked() as entries:
            current = self.keyring.fernet() if entries else None
            for name, entry in entries.items():  # all readable before anything changes
                self._decrypt(name, entry["token"], current)
            if self.keyring.from_env:
                if drop_old:
                    raise SecretKeyError(
                        "the keys come from CORRAL_SECRET_KEY: remove the old ones there"
                    )
                keys = self.keyring.keys()
            else:
                keys = [Fernet.generate_key(), *self.keyring.keys()]
                self.keyring.write(keys)
            fernet = MultiFernet([Fernet(k) for k in keys])
            for entry in entries.values():
                entry["token"] = fernet.rotate(entry["token"].encode("ascii")).decode("ascii")
            if entries:
                self._save(entries)
            if drop_old and not self.keyring.from_env:
                self.keyring.write(keys[:1])
            return len(entries)
