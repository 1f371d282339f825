"""Shared CLI output: consoles, JSON, and the human formats of durations, money and runs."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from corral.cli.lazy import LazyConsole
from corral.service.timing import run_duration as run_duration  # re-exported

#: rich is imported on first use, so `--json` paths never pay for it
console = LazyConsole(highlight=False, soft_wrap=True)  # log lines are never re-wrapped
err_console = LazyConsole(stderr=True, highlight=False)

STATE_STYLE = {
    "PENDING": "yellow",
    "PROVISIONING": "cyan",
    "RUNNING": "bold cyan",
    "RECOVERING": "magenta",
    "STOPPING": "yellow",
    "SUCCEEDED": "bold green",
    "FAILED": "bold red",
    "CANCELLED": "dim",
    "STOPPED": "yellow",
}


def print_whole(renderable: Any) -> None:
    """Print a table at its natural width on stdout: a narrow terminal wraps its long lines
    (as kubectl's and SkyPilot's tables do) instead of the table eliding prices and dates."""
    real = console._get()
    natural = real.measure(renderable, options=real.options.update_width(100_000)).maximum
    if natural <= real.width:
        real.print(renderable)
        return
    saved = real._width  # None: the terminal's, read again each time
    real.width = natural
    try:
        real.print(renderable)
    finally:
        real._width = saved


def print_json(obj: Any) -> None:
    """``obj`` (a service view, or plain JSON data) as indented JSON on stdout."""
    if hasattr(obj, "to_json"):
        obj = obj.to_json()
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def styled_state(state: str) -> str:
    return f"[{STATE_STYLE.get(state, 'white')}]{state}[/]"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def fmt_cost(usd: float | None) -> str:
    if usd is None:
        return "-"
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"


def ago(ts: datetime | None, now: datetime | None = None) -> str:
    if ts is None:
        return "-"
    now = now or datetime.now(UTC)
    return fmt_duration((now - ts).total_seconds()) + " ago"
