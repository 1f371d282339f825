"""Launch keys and small file helpers shared by providers."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral.errors import BadInput

KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_key(key: str) -> str:
    """``key`` if it is a launch key a provider can use in names and paths, else BadInput."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise BadInput(
            f"bad instance key {key!r}: use letters, digits, '.', '_' and '-' (at most 128)"
        )
    return key


def utcnow() -> datetime:
    return datetime.now(UTC)


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None if it is missing or not (yet) valid JSON."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
