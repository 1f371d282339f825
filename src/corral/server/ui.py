"""How the dashboard shows values: Jinja2 templates (autoescaped) and the filters they use.
Presentation only: every value comes from a service call."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

#: the CSS class of each run state's badge
STATE_CLASS = {
    "PENDING": "idle",
    "PROVISIONING": "busy",
    "RUNNING": "busy",
    "RECOVERING": "warn",
    "STOPPING": "warn",
    "SUCCEEDED": "good",
    "FAILED": "bad",
    "CANCELLED": "idle",
    "STOPPED": "stopped",
}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "STOPPED"}


def duration(seconds: Any) -> str:
    """``3725`` -> ``1h 02m``; ``42.3`` -> ``42s``; nothing -> ``-``."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return "-"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def usd(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:.4f}"


def when(value: Any) -> str:
    """A datetime, an ISO string or unix seconds as ``2026-11-25 18:40:12 UTC``."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    if not isinstance(value, datetime):
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def number(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-" if value is None else str(value)
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def size(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def span(start: Any, end: Any, t0: float, t1: float) -> dict[str, float]:
    """Left and width (percent of ``t0..t1``) of a bar from ``start`` to ``end``."""
    width = max(t1 - t0, 1e-9)
    a = min(max(float(start if start is not None else t0), t0), t1)
    b = min(max(float(end if end is not None else t1), a), t1)
    return {
        "left": round(100 * (a - t0) / width, 3),
        "width": round(max(100 * (b - a) / width, 0.4), 3),
    }


def templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(TEMPLATES))
    env = t.env
    env.filters.update(duration=duration, usd=usd, when=when, number=number, size=size)
    env.globals.update(state_class=STATE_CLASS, terminal=TERMINAL, span=span)
    return t
