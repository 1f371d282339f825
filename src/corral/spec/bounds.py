"""Upper bounds on the numbers of a spec: what no machine, calendar or budget can hold.

Each bound is checked after the field's own parsing and named in the error
("must be at most 64, got 100"). They are far above any real need; they exist so that a typo
(``max_runtime: 10000000d``) or a hostile spec is refused with a clear line instead of
overflowing a computation later.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import AfterValidator

from corral.spec.units import format_duration, format_size

MAX_GPUS = 64  # per machine (the largest have 8 or 16)
MAX_NODES = 256  # machines of one job (about the largest gang a provider sells)
MAX_CPUS = 4096.0
MAX_MEMORY_GB = 64.0 * 1024  # 64 TB
MAX_DISK_GB = 1024.0 * 1024  # 1 PB
MAX_HOURLY_PRICE_USD = 1_000.0  # the whole machine, per hour
MAX_COST_USD = 1_000_000.0
MAX_RESTARTS = 1_000
MAX_KEEP = 10_000  # checkpoints kept
MAX_DURATION_S = 366 * 86400.0  # a year


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def at_most(bound: float, shown: Callable[[float], str] = _plain) -> AfterValidator:
    """A validator refusing values above ``bound``; ``shown`` writes both numbers."""

    def check(value: float) -> float:
        if value > bound:
            raise ValueError(f"must be at most {shown(bound)}, got {shown(value)}")
        return value

    return AfterValidator(check)


def _duration(seconds: float) -> str:
    return format_duration(seconds) if seconds < 1e12 else f"{seconds:g}s"


def _size(gb: float) -> str:
    return format_size(gb) if gb < 1e12 else f"{gb:g}GB"


AT_MOST_DURATION = at_most(MAX_DURATION_S, _duration)


def size_at_most(bound_gb: float) -> AfterValidator:
    """:func:`at_most` for a size in GB, both sizes written with their unit."""
    return at_most(bound_gb, _size)
