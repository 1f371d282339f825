"""What ``/metrics`` shows (``corral server``), gathered in one call: runs and cost by state,
each recent run's cost, webhook deliveries and failures, preemptions and recoveries, the controller's loop (what it
publishes, :mod:`corral.control.loop_metrics`), every GPU with its verdict
(:mod:`corral.service.monitoring`) and, for a provider whose runs wait in queues of its own
(:class:`~corral.providers.base.ReportsQueue`, a worker pool), each queue's length.

The front door turns the snapshot into the Prometheus text format; nothing here knows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from corral import paths
from corral.control import loop_metrics
from corral.control.lock import running_pid
from corral.control.providers import enabled_names
from corral.errors import CorralError
from corral.providers.base import ReportsQueue
from corral.providers.registry import get_provider, provider_class
from corral.service._store import using
from corral.service.gpu_health import GpuThresholds
from corral.service.monitoring import GpuReport, gpu_report
from corral.service.views import View
from corral.store import TERMINAL_STATES, RunState, Store

#: ended runs keep their own cost series for this long after they end
RECENT_WINDOW = timedelta(hours=24)
#: at most this many ended runs have a series of their own (the newest)
RECENT_LIMIT = 200


class RunCost(View):
    run_id: str
    name: str
    state: str
    cost_usd: float


class ControllerLoop(View):
    """The controller's own measures (absent until a controller has published them)."""

    pid: int
    started_at: float
    updated_at: float
    ticks: int
    #: [upper bound ("+Inf" last), ticks that took at most that long], cumulative
    buckets: list[tuple[float | str, int]]
    sum_s: float
    last_tick_s: float
    active_runs: int


class QueueLength(View):
    provider: str
    queue: str
    length: int


class MetricsSnapshot(View):
    runs_by_state: dict[str, int]
    cost_by_state: dict[str, float]
    cost_total_usd: float
    run_costs: list[RunCost]
    webhook_deliveries: int
    webhook_failures: int
    #: attempts that ended preempted, over every run
    preemptions: int
    #: attempts after a run's first (each a recovery that got as far as launching)
    recoveries: int
    controller_running: bool
    controller_loop: ControllerLoop | None
    gpus: GpuReport
    #: None: no enabled provider has queues (no queue metric at all); else every queue read
    queues: list[QueueLength] | None
    #: each enabled provider with queues: whether its queues could be read now
    queue_providers: dict[str, bool]
    #: providers whose queues could not be read (or that could not be built), with why
    queue_errors: dict[str, str]


class QueueProviders:
    """The enabled providers that report queues, built once (on first use) and kept: a
    scrape must not build a broker connection each time."""

    def __init__(self, names: list[str] | None = None):
        self._names = names
        self._built: dict[str, ReportsQueue] | None = None
        self.errors: dict[str, str] = {}

    def get(self) -> dict[str, ReportsQueue]:
        if self._built is None:
            built: dict[str, ReportsQueue] = {}
            for name in self._names if self._names is not None else enabled_names():
                try:
                    if issubclass(provider_class(name), ReportsQueue):
                        provider = get_provider(name)
                        assert isinstance(provider, ReportsQueue)
                        built[name] = provider
                except CorralError as e:
                    self.errors[name] = e.message
            self._built = built
        return self._built


def _queues(
    providers: QueueProviders,
) -> tuple[list[QueueLength] | None, dict[str, bool], dict[str, str]]:
    built = providers.get()
    errors = dict(providers.errors)
    if not built:
        return None, {}, errors
    out: list[QueueLength] = []
    for name, provider in sorted(built.items()):
        try:
            lengths = provider.queue_lengths()
        except Exception as e:  # a broker down is a fact to show, not a failed scrape
            errors[name] = e.message if isinstance(e, CorralError) else type(e).__name__
            continue
        out += [QueueLength(provider=name, queue=q, length=int(n)) for q, n in lengths.items()]
    return out, {name: name not in errors for name in sorted(built)}, errors


def _loop(data: Mapping[str, Any] | None) -> ControllerLoop | None:
    if data is None:
        return None
    try:
        hist = data["tick_seconds"]
        return ControllerLoop(
            pid=int(data["pid"]),
            started_at=float(data["started_at"]),
            updated_at=float(data["updated_at"]),
            ticks=int(data["ticks"]),
            buckets=[(b[0], int(b[1])) for b in hist["buckets"]],
            sum_s=float(hist["sum"]),
            last_tick_s=float(data["last_tick_s"]),
            active_runs=int(data["active_runs"]),
        )
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def recent_runs(store: Store, *, now: datetime | None = None) -> list[RunCost]:
    """Every active run and the ended runs of the last :data:`RECENT_WINDOW` (the newest
    :data:`RECENT_LIMIT`), with their cost."""
    since = (now or datetime.now(UTC)) - RECENT_WINDOW
    active = store.list_runs(active_only=True)
    ended = store.list_runs(states=sorted(TERMINAL_STATES), limit=RECENT_LIMIT)
    recent = [r for r in ended if r.finished_at is not None and r.finished_at >= since]
    return [
        RunCost(run_id=r.id, name=r.name, state=r.state, cost_usd=r.cost_usd)
        for r in (*active, *recent)
    ]


def snapshot(
    *,
    store: Store | None = None,
    thresholds: GpuThresholds | None = None,
    queue_providers: QueueProviders | None = None,
    environ: Mapping[str, str] | None = None,
) -> MetricsSnapshot:
    """Everything ``/metrics`` shows, read now."""
    with using(store) as st:
        totals = {t.state: t for t in st.run_totals()}
        runs = recent_runs(st)
        hooks = st.webhook_totals()
        attempts = st.attempt_totals()
        gpus = gpu_report(store=st, thresholds=thresholds, environ=environ)
    queues, readable, queue_errors = _queues(queue_providers or QueueProviders())
    return MetricsSnapshot(
        runs_by_state={s.value: totals[s].runs if s in totals else 0 for s in RunState},
        cost_by_state={s.value: round(totals[s].cost_usd, 6) for s in RunState if s in totals},
        cost_total_usd=round(sum(t.cost_usd for t in totals.values()), 6),
        run_costs=runs,
        webhook_deliveries=hooks.delivered,
        webhook_failures=hooks.failed,
        preemptions=attempts.preempted,
        recoveries=attempts.recoveries,
        controller_running=running_pid() is not None,
        controller_loop=_loop(loop_metrics.read(paths.home())),
        gpus=gpus,
        queues=queues,
        queue_providers=readable,
        queue_errors=queue_errors,
    )
