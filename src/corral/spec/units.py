"""Durations (``90s``, ``1h30m``) and sizes (``32GB``, ``512Gi``) as written in a spec.

Durations are stored as float seconds, sizes as float GB. Both must be positive and finite.
Size units: ``GB`` and ``GiB`` (also ``G``, ``Gi``) are treated alike, because clouds list
memory in GiB but call it GB; ``TB`` = 1024 GB, ``MB`` = 1/1024 GB. A bare number means GB.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

DURATION_FORMS = "a number of seconds or e.g. '90s', '30m', '6h', '1d', '1h30m'"
SIZE_FORMS = "e.g. '32GB', '512Gi', '1TB' or a number of GB"

_NUM = r"(\d+(?:\.\d+)?)"
_DURATION_RE = re.compile(rf"^(?:{_NUM}d)?(?:{_NUM}h)?(?:{_NUM}m)?(?:{_NUM}s)?$")
_UNIT_SECONDS = (86400.0, 3600.0, 60.0, 1.0)
_PLAIN_NUMBER_RE = re.compile(rf"^{_NUM}$")

_SIZE_RE = re.compile(rf"^{_NUM}\s*([kmgt])?(i?b?)$", re.IGNORECASE)
_SIZE_GB = {"k": 1.0 / 1024**2, "m": 1.0 / 1024, "g": 1.0, "t": 1024.0}


def _positive(value: float, what: str, forms: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be positive, got {value:g} ({forms})")
    return float(value)


def parse_duration(value: object) -> float:
    """Seconds in a duration: ``90``, ``"90s"``, ``"30m"``, ``"6h"``, ``"1d"``, ``"1h30m"``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration ({DURATION_FORMS}), got {type_name(value)}")
    if isinstance(value, (int, float)):
        return _positive(float(value), "a duration", DURATION_FORMS)
    text = value.strip().lower().replace(" ", "")
    if _PLAIN_NUMBER_RE.match(text):
        return _positive(float(text), "a duration", DURATION_FORMS)
    match = _DURATION_RE.match(text)
    if not text or not match:
        raise ValueError(f"invalid duration '{value}' (expected {DURATION_FORMS})")
    seconds = sum(
        float(n) * unit for n, unit in zip(match.groups(), _UNIT_SECONDS, strict=True) if n
    )
    return _positive(seconds, f"duration '{value}'", DURATION_FORMS)


def _plain(number: float) -> str:
    """Shortest exact decimal text of a float, never in exponent form."""
    text = format(Decimal(repr(number)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_duration(seconds: float) -> str:
    """The inverse of :func:`parse_duration`: ``5400`` -> ``"1h30m"``, ``0.5`` -> ``"0.5s"``."""
    if seconds != int(seconds) or seconds >= 1e15:
        return _plain(seconds) + "s"
    rest = int(seconds)
    parts = []
    for unit, size in zip("dhms", (86400, 3600, 60, 1), strict=True):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def parse_size(value: object) -> float:
    """GB in a size: ``"32GB"``, ``"512Gi"``, ``"1TB"``, ``"500MB"``, or a bare number of GB."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a size ({SIZE_FORMS}), got {type_name(value)}")
    if isinstance(value, (int, float)):
        return _positive(float(value), "a size", SIZE_FORMS)
    match = _SIZE_RE.match(value.strip())
    if not match or (match.group(3) and not match.group(2)):
        raise ValueError(f"invalid size '{value}' (expected {SIZE_FORMS})")
    number, unit, _ = match.groups()
    return _positive(float(number) * _SIZE_GB[(unit or "g").lower()], f"size '{value}'", SIZE_FORMS)


def format_size(gb: float) -> str:
    """``32.0`` -> ``"32GB"``, ``0.5`` -> ``"0.5GB"``."""
    return _plain(gb) + "GB"


def describe(value: object) -> str:
    """A short text for a wrong value: ``'eight'``, ``3``, ``true``, else its type name.

    Use only where the value cannot be a secret (never for env or secret fields)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str) and len(value) <= 40 and "\n" not in value:
        return f"'{value}'"
    return type_name(value)


def type_name(value: object) -> str:
    """How a YAML user would name the type of ``value`` (never shows the value itself)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__
