"""The progress file: JSON lines the SDK appends and the agent tails (``CORRAL_PROGRESS_FILE``).

Record kinds (every record has ``ts``, unix seconds, and ``kind``):

* ``progress``: ``step``, ``total`` (optional), ``loss`` (optional), ``epoch`` (optional),
  ``metrics`` (dict).
* ``metrics``: ``step``, ``metrics`` (dict).
* ``checkpoint``: ``step``, ``path``, ``metrics`` (dict) once a checkpoint is durable.
* ``table``: ``name``, ``step``, ``rows`` (list of dicts), e.g. the worst samples of an eval.

Readers ignore kinds they do not know.

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

from corral.constants import ENV_PROGRESS_FILE

_lock = threading.Lock()


#: Nesting deeper than this is written as text (a structure that contains itself ends here).
MAX_DEPTH = 32


def _clean(value: Any, depth: int = 0) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_DEPTH:
        return "..."
    if isinstance(value, dict):
        return {str(k): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, depth + 1) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return _clean(value.item(), depth + 1)
        except Exception:
            return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def emit(kind: str, /, *, file: str | None = None, **fields: Any) -> bool:
    """Append one record to ``file`` (default: ``$CORRAL_PROGRESS_FILE``); returns False (and
    does nothing) when there is no file to write to or the write failed."""
    target = file or os.environ.get(ENV_PROGRESS_FILE)
    if not target:
        return False
    record = {"ts": time.time(), "kind": kind, **_clean(fields)}
    line = json.dumps(record, separators=(",", ":")) + "\n"
    try:
        with _lock:
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
            with open(target, "a", encoding="utf-8") as f:
                f.write(line)
        return True
    except OSError:
        return False
