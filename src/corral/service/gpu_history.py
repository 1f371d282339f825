"""GPU readings over time (``GET /api/v1/monitoring/gpu/history``, the charts of the dashboard's
GPU page): what the controller recorded of every GPU (``corral.control.gpu_history``: this
machine's, each run's node's, once a minute by default, kept 7 days), over a window, at most
``points`` points per GPU (the means of equal spans when the window holds more readings)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal

from pydantic import Field

from corral.errors import BadInput, CorralError
from corral.service._store import using
from corral.service.views import View
from corral.store import Store
from corral.store.gpu_history import HOST, GpuPoints, step_for

DEFAULT_SINCE = "6h"
DEFAULT_POINTS = 300
MIN_POINTS = 10
MAX_POINTS = 2000
#: what ``since`` and ``until`` take: a duration before now, or @unix seconds (every value it
#: matches is a moment: the API's document says exactly what it accepts)
WHEN_PATTERN = r"^(?:@([0-9]{1,12})|([0-9]{1,9}(?:\.[0-9]{1,3})?)([smhdw]?))$"
WHEN_MEANING = "a duration before now (90s, 30m, 6h, 7d, 2w; 0: now) or @unix seconds"
_WHEN = re.compile(WHEN_PATTERN)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: the last second a datetime holds (9999-12-31 23:59:59 UTC)
_LAST = 253402300799.0

#: [unix seconds, value]
Pair = tuple[float, float]


class GpuSeries(View):
    """One GPU of one place over the window."""

    kind: Literal["host", "node"] = Field(
        description="host: the controller's machine; node: a run's node (one per attempt)"
    )
    machine: str = Field(description="the host name, or '<run name> (attempt N)' for a node")
    run_id: str | None = None
    run_name: str | None = None
    attempt: int | None = None
    index: int = Field(description="the GPU's index on its machine")
    uuid: str = Field(description="the GPU's uuid where the driver gave one, else ''")
    name: str = Field(description="the GPU model, where known, else ''")
    memory_total_mb: int | None = None
    utilization_pct: list[Pair] = Field(description="[unix seconds, %] per point")
    memory_used_mb: list[Pair] = Field(description="[unix seconds, MB] per point")
    temperature_c: list[Pair] = Field(
        description="[unix seconds, °C] per point (a node's readings have none)"
    )


class GpuHistory(View):
    """Every GPU's readings between ``since`` and ``until``."""

    since: float = Field(description="unix seconds")
    until: float = Field(description="unix seconds")
    step_s: int = Field(
        description="the seconds each point stands for at most: a point is the mean of the "
        "readings of its span (1: every reading as recorded)"
    )
    series: list[GpuSeries]


def parse_when(text: str, now: datetime, what: str) -> datetime:
    """A moment of :data:`WHEN_PATTERN`: a duration before ``now`` (``90s``, ``30m``, ``6h``,
    ``7d``, ``2w``, or seconds; 0: now) or ``@`` and unix seconds; BadInput naming ``what``
    otherwise. Moments before 1970 or after 9999 are taken as those bounds."""
    found = _WHEN.fullmatch(text)
    if found is None:
        raise BadInput(
            f"{what}={text[:80]!r}: expected {WHEN_MEANING}",
            fields={"errors": [{"field": what, "message": f"expected {WHEN_MEANING}"}]},
        )
    at, number, unit = found.group(1), found.group(2), found.group(3)
    ago = 0.0 if at is not None else float(number) * _UNITS[unit or "s"]
    seconds = float(at) if at is not None else now.timestamp() - ago
    return datetime.fromtimestamp(min(max(seconds, 0.0), _LAST), UTC)


def gpu_history(
    *,
    since: str = DEFAULT_SINCE,
    until: str | None = None,
    gpu: str | None = None,
    machine: str | None = None,
    points: int = DEFAULT_POINTS,
    store: Store | None = None,
    now: datetime | None = None,
) -> GpuHistory:
    """Every recorded GPU's readings from ``since`` to ``until`` (default now; nothing when
    ``since`` is later), at most ``points`` per GPU. ``gpu``: only the GPUs of that index or
    uuid; ``machine``: only those of that host, or of that run's node (its id or name)."""
    if not MIN_POINTS <= points <= MAX_POINTS:
        raise BadInput(f"points={points}: expected {MIN_POINTS} to {MAX_POINTS}")
    at = now or datetime.now(UTC)
    start = parse_when(since, at, "since")
    end = parse_when(until, at, "until") if until else at
    with using(store) as st:
        chosen = [s.id for s in st.gpu_series() if gpu is None or gpu in (str(s.gpu), s.uuid)]
        found = (
            st.gpu_history(start, end, series=chosen, max_points=points)
            if chosen and start <= end
            else []
        )
        series = [_view(st, p) for p in found]
    if machine is not None:
        series = [s for s in series if machine in (s.machine, s.run_id, s.run_name)]
    return GpuHistory(
        since=start.timestamp(),
        until=end.timestamp(),
        step_s=step_for(start, end, points),
        series=series,
    )


def _view(store: Store, found: GpuPoints) -> GpuSeries:
    s = found.series
    run_name = name = None
    if s.kind != HOST:
        try:
            run_name = store.get_run(s.source, with_spec=False).name
        except CorralError:
            pass
        if not s.name:
            try:  # what the attempt was launched on
                name = store.get_attempt(s.source, s.attempt).offer.get("gpu_type")
            except CorralError:
                pass
    return GpuSeries(
        kind="host" if s.kind == HOST else "node",
        machine=s.source if s.kind == HOST else f"{run_name or s.source} (attempt {s.attempt})",
        run_id=None if s.kind == HOST else s.source,
        run_name=run_name,
        attempt=None if s.kind == HOST else s.attempt,
        index=s.gpu,
        uuid=s.uuid,
        name=s.name or str(name or ""),
        memory_total_mb=s.memory_total_mb,
        utilization_pct=[(float(t), u) for t, u, _, _ in found.points if u is not None],
        memory_used_mb=[(float(t), m) for t, _, m, _ in found.points if m is not None],
        temperature_c=[(float(t), c) for t, _, _, c in found.points if c is not None],
    )
