"""The progress file: JSON lines the SDK appends and the agent tails (``CORRAL_PROGRESS_FILE``).

Record kinds (every record has ``ts``, unix seconds, and ``kind``):

* ``progress``: ``step``, ``total`` (optional), ``loss`` (optional), ``epoch`` (optional),
  ``metrics`` (dict).
* ``metrics``: ``step``, ``metrics`` (dict).
* ``checkpoint``: ``step``, ``path``, ``metrics`` (dict) once a checkpoint is durable.
* ``table``: ``name``, ``step``, ``rows`` (list of dicts), e.g. the worst samples of an eval.

Readers ignore kinds they do not know.

A number that is not finite (a diverged loss, an overflowed gradient norm) is written as the
string ``"nan"``, ``"inf"`` or ``"-inf"``, so the file stays strict JSON and a diverged value is
not mistaken for a missing one (``null``, or no key). Values JSON has no type for are written as
their text.

Writing never raises into the training loop: a failure to write progress is not a reason to
lose a training run.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any

from corral.secrets.redact import redact_data
from corral.wire.env import ENV_PROGRESS_FILE, ENV_SECRET_NAMES

_lock = threading.Lock()


#: Nesting deeper than this is written as text (a structure that contains itself ends here).
MAX_DEPTH = 32


def non_finite(value: float) -> str:
    """The text a non-finite float is written as: ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def _clean(value: Any, depth: int = 0) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else non_finite(value)
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if depth >= MAX_DEPTH:  # also ends ``item()`` chains that never reach a plain value
        return "..." if isinstance(value, (dict, list, tuple)) else _text(value)
    if isinstance(value, dict):
        return {_key(k): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, depth + 1) for v in value]
    try:
        item = value.item if callable(getattr(value, "item", None)) else None
    except Exception:
        item = None
    if item is not None:  # numpy / torch scalars
        try:
            return _clean(item(), depth + 1)
        except Exception:
            pass
    return _text(value)


def _key(key: Any) -> str:
    return key if isinstance(key, str) else _text(key)


def emit(kind: str, /, *, file: str | None = None, **fields: Any) -> bool:
    """Append one record to ``file`` (default: ``$CORRAL_PROGRESS_FILE``); returns False (and
    does nothing) when there is no file to write to or the write failed."""
    target = file or os.environ.get(ENV_PROGRESS_FILE)
    if not target:
        return False
    try:
        record = {"ts": time.time(), "kind": kind, **_clean(fields)}
        if os.environ.get(ENV_SECRET_NAMES):  # the job's secrets never reach the file
            record = redact_data(record)
        line = json.dumps(record, separators=(",", ":")) + "\n"
    except Exception:  # nothing about a record may stop the training loop
        return False
    try:
        with _lock:
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
            with open(target, "a", encoding="utf-8") as f:
                f.write(line)
        return True
    except OSError:
        return False
