"""Redaction: every secret value in play becomes ``***`` in text and JSON-like data.

"In play" (:func:`current_redactor`) means: every value in the secret store; provider and
other credentials in the environment (``AWS_SECRET_ACCESS_KEY``, ``RUNPOD_API_KEY``, any
variable named ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``, ...); the values of
the names registered with :func:`register_names` (a run's spec ``secrets:``) and every value
registered with :func:`register_values` (:func:`corral.secrets.resolve` registers what it
returns). The redactor is rebuilt when one of those changes (the store file, the environment,
a registration), so a secret set in another process is redacted here too.

Values shorter than :data:`MIN_LENGTH` (6) characters are never redacted: a secret like
``abc`` would turn every ``abc`` in every log into ``***`` and hide nothing worth hiding.

:func:`install_log_redaction` applies it to every log record of the process;
:class:`RedactingFilter` is the same as a ``logging.Filter`` for one handler.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from corral.wire.env import ENV_SECRET_NAMES

MASK = "***"
MIN_LENGTH = 6

#: Environment variables that hold credentials, whatever their name says.
CREDENTIAL_ENV = frozenset(
    {
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "RUNPOD_API_KEY",
        "SALAD_API_KEY",
        "IONET_API_KEY",
        "IO_NET_API_KEY",
        "CORRAL_SECRET_KEY",
        "CORRAL_AGENT_TOKEN",
        "HF_TOKEN",
        "WANDB_API_KEY",
        "GITHUB_TOKEN",
    }
)
_CREDENTIAL_NAME = re.compile(
    r"(?:^|_)(?:API_?KEY|TOKEN|SECRET|SECRET_KEY|SECRET_ACCESS_KEY|ACCESS_KEY_ID|PASSWORD|"
    r"PASSWD|PRIVATE_KEY|CREDENTIALS?)$"
)


@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=4096)
def is_credential_name(name: str) -> bool:
    """Whether an environment variable of this name holds a credential (remembered per
    name: every redaction asks it of the whole environment)."""
    return name in CREDENTIAL_ENV or bool(_CREDENTIAL_NAME.search(name.upper()))


def job_secret_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names of a job's secrets: ``CORRAL_SECRET_NAMES`` (comma separated), which the
    controller sets beside the values in the job's environment."""
    env = os.environ if environ is None else environ
    return [n.strip() for n in env.get(ENV_SECRET_NAMES, "").split(",") if n.strip()]


def job_secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of a job's secrets (see :func:`job_secret_names`); short ones are left out
    (they are never masked: too many false hits)."""
    env = os.environ if environ is None else environ
    values = (env.get(n, "") for n in job_secret_names(env))
    return [v for v in values if len(v) >= MIN_LENGTH]


def env_credentials(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that hold credentials (by name), and their values."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if v and is_credential_name(k)}


class Redactor:
    """Replaces each known value (of at least ``min_length`` characters) with ``***``; also
    its JSON-escaped and URL-encoded forms, so a value inside a JSON document or a URL is
    found too. Longer values are replaced first (a value containing another goes whole)."""

    def __init__(self, values: Iterable[str] = (), *, min_length: int = MIN_LENGTH):
        self.min_length = min_length
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        new = {v for v in values if isinstance(v, str) and len(v) >= self.min_length}
        if new - self._values:
            self._values |= new
            self._pattern = self._compile()

    @property
    def values(self) -> frozenset[str]:
        return frozenset(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)

    def _compile(self) -> re.Pattern[str] | None:
        forms: set[str] = set()
        for v in self._values:
            forms.update((v, json.dumps(v)[1:-1], quote(v, safe=""), quote_plus(v)))
        if not forms:
            return None
        ordered = sorted(forms, key=len, reverse=True)
        return re.compile("|".join(re.escape(f) for f in ordered))

    def redact(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def redact_data(self, value: Any) -> Any:
        """``value`` with every string in it (dict keys too, at any depth) redacted. Lists and
        tuples come back as lists, dicts as dicts; other values unchanged."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self.redact_data(k): self.redact_data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.redact_data(v) for v in value]
        return value


# --- the process-wide redactor ---------------------------------------------------------------

_lock = threading.RLock()
_local = threading.local()
_registered_values: set[str] = set()
_registered_names: set[str] = set()
_version = 0
_cache: tuple[Any, Redactor] | None = None
_store_values: dict[str, tuple[Any, list[str]]] = {}  # store path -> (fingerprint, values)


def register_values(values: Iterable[str]) -> None:
    """Redact these values from now on in this process (resolved secrets, for instance)."""
    global _version
    new = {v for v in values if isinstance(v, str) and len(v) >= MIN_LENGTH}
    with _lock:
        if new - _registered_values:
            _registered_values.update(new)
            _version += 1


def register_names(names: Iterable[str]) -> None:
    """Redact the values of these secrets (from the store or the environment) from now on."""
    global _version
    with _lock:
        new = set(names) - _registered_names
        if new:
            _registered_names.update(new)
            _version += 1


def forget_registered() -> None:
    """Drop every registered value and name (for tests and long-lived embedders)."""
    global _version, _cache
    with _lock:
        _registered_values.clear()
        _registered_names.clear()
        _store_values.clear()
        _version += 1
        _cache = None


def _home() -> Path:
    from corral.wire.env import ENV_HOME

    return Path(os.environ.get(ENV_HOME) or "~/.corral").expanduser()


def _read_store(home: Path) -> tuple[Any, list[str]]:
    """The store's values, cached per file version. A store that cannot be read (no key, a
    wrong key) keeps the values last read from it, if any."""
    from corral.errors import CorralError
    from corral.secrets.store import SecretStore

    store = SecretStore(home)
    fp = store.fingerprint()
    key = str(store.path)
    cached = _store_values.get(key)
    if cached and cached[0] == fp:
        return cached
    if fp is None:
        values: list[str] = []
    else:
        try:
            values = list(store.values().values())
        except (CorralError, OSError):
            values = cached[1] if cached else []
    _store_values[key] = (fp, values)
    return fp, values


_creds_seen: tuple[tuple[Any, ...], dict[str, str]] | None = None


def _current_credentials() -> dict[str, str]:
    """:func:`env_credentials` of this process, worked out again only when its environment
    changed (compared as raw bytes: every redaction asks, a controller thousands of times a
    second, and decoding the whole environment each time was most of the cost)."""
    global _creds_seen
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return env_credentials()
    key = tuple(data.items())
    seen = _creds_seen
    if seen is not None and seen[0] == key:
        return seen[1]
    creds = env_credentials()
    _creds_seen = (key, creds)
    return creds


def current_redactor() -> Redactor:
    """The redactor for every secret value in play now (see the module docstring)."""
    global _cache
    if getattr(_local, "building", False):  # a log line while we build: use the last one
        return _cache[1] if _cache else Redactor()
    home = _home()
    try:
        info = os.stat(home / "secrets.json")
        store_fp: tuple[int, ...] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
    except OSError:
        store_fp = None
    env = os.environ
    with _lock:
        named = {n: env.get(n, "") for n in (*_registered_names, *job_secret_names(env))}
        creds = _current_credentials()
        fingerprint = (str(home), store_fp, _version, tuple(sorted({**creds, **named}.items())))
        if _cache is not None and _cache[0] == fingerprint:
            return _cache[1]
        _local.building = True
        try:
            _, store_values = _read_store(home)
            values = [*store_values, *creds.values(), *named.values(), *_registered_values]
            redactor = Redactor(values)
        finally:
            _local.building = False
        _cache = (fingerprint, redactor)
        return redactor


def redactor_for(names: Iterable[str]) -> Redactor:
    """The redactor for every secret value in play, the values of the secrets ``names`` (a
    run's spec ``secrets:``) registered first: what a process that did not resolve them itself
    (a restarted controller, the CLI showing a run) uses on anything that came from the run."""
    register_names(names)
    return current_redactor()


def redact(text: str) -> str:
    """``text`` with every secret value in play replaced by ``***``."""
    return current_redactor().redact(text)


def redact_data(value: Any) -> Any:
    """``value`` (JSON-like) with every secret value in play replaced by ``***``."""
    return current_redactor().redact_data(value)


# --- logging ---------------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """Redacts a record's message (after %-formatting), its traceback and its stack text."""

    def __init__(self, redactor: Redactor | None = None):
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        r = self._redactor if self._redactor is not None else current_redactor()
        if not r:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to logging to report
            return True
        clean = r.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = r.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = r.redact(record.stack_info)
        return True


_FACTORY_MARK = "_corral_redacting"


def install_log_redaction(*handlers: logging.Handler) -> None:
    """Redact every log record of this process from now on, whichever logger or handler it
    goes through (a log record factory, installed once); ``handlers`` also get a
    :class:`RedactingFilter` (for records made before, or by a foreign factory). Idempotent."""
    current = logging.getLogRecordFactory()
    if not getattr(current, _FACTORY_MARK, False):
        shared = RedactingFilter()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = current(*args, **kwargs)
            shared.filter(record)
            return record

        setattr(factory, _FACTORY_MARK, True)
        logging.setLogRecordFactory(factory)
    for handler in handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
