"""A :class:`~corral.service.metrics.MetricsSnapshot` in the Prometheus text format
(``prometheus-client``'s own families and writer). Presentation only: every number comes
from the snapshot."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from corral.service.metrics import MetricsSnapshot
from corral.service.monitoring import MachineGpus


def _gpu_families(machines: list[MachineGpus]) -> Iterator[Metric]:
    labels = ["machine", "run_id", "gpu", "model"]
    util = GaugeMetricFamily(
        "corral_gpu_utilization_pct", "GPU utilisation, percent", labels=labels
    )
    used = GaugeMetricFamily("corral_gpu_memory_used_mb", "GPU memory used, MiB", labels=labels)
    total = GaugeMetricFamily("corral_gpu_memory_total_mb", "GPU memory, MiB", labels=labels)
    temp = GaugeMetricFamily("corral_gpu_temperature_c", "GPU temperature, °C", labels=labels)
    procs = GaugeMetricFamily("corral_gpu_processes", "processes on the GPU", labels=labels)
    ecc = GaugeMetricFamily(
        "corral_gpu_ecc_uncorrected",
        "uncorrected ECC errors since the driver loaded",
        labels=labels,
    )
    health_labels = ["machine", "run_id"]
    warnings = GaugeMetricFamily(
        "corral_gpu_health_warnings", "GPU health warnings of the machine", labels=health_labels
    )
    issues = GaugeMetricFamily(
        "corral_gpu_health_issues", "GPU health issues of the machine", labels=health_labels
    )
    for m in machines:
        run_id = m.run_id or ""
        warnings.add_metric([m.name, run_id], len(m.health.warnings))
        issues.add_metric([m.name, run_id], len(m.health.issues))
        for g in m.gpus:
            values = [m.name, run_id, g.id, g.name]
            util.add_metric(values, g.utilization_pct)
            used.add_metric(values, g.memory_used_mb)
            total.add_metric(values, g.memory_total_mb)
            if g.temperature_c is not None:
                temp.add_metric(values, g.temperature_c)
            if g.processes is not None:
                procs.add_metric(values, g.processes)
            if g.ecc_uncorrected is not None:
                ecc.add_metric(values, g.ecc_uncorrected)
    yield from (util, used, total, temp, procs, ecc, warnings, issues)


class _Snapshot(Collector):
    def __init__(self, snap: MetricsSnapshot):
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        s = self.snap
        runs = GaugeMetricFamily("corral_runs", "runs in each state", labels=["state"])
        for state, n in s.runs_by_state.items():
            runs.add_metric([state], n)
        yield runs
        by_state = GaugeMetricFamily(
            "corral_runs_cost_usd", "what the runs in each state cost, USD", labels=["state"]
        )
        for state, usd in s.cost_by_state.items():
            by_state.add_metric([state], usd)
        yield by_state
        yield CounterMetricFamily("corral_cost_usd", "what every run cost, USD", s.cost_total_usd)
        per_run = GaugeMetricFamily(
            "corral_run_cost_usd",
            "a run's cost so far, USD (active runs and those ended in the last 24 h)",
            labels=["run_id", "name", "state"],
        )
        for r in s.run_costs:
            per_run.add_metric([r.run_id, r.name, r.state], r.cost_usd)
        yield per_run
        yield CounterMetricFamily(
            "corral_webhook_deliveries", "webhook deliveries made", s.webhook_deliveries
        )
        yield CounterMetricFamily(
            "corral_webhook_failures", "webhook deliveries given up on", s.webhook_failures
        )
        yield CounterMetricFamily(
            "corral_preemptions", "attempts that ended preempted", s.preemptions
        )
        yield CounterMetricFamily(
            "corral_recoveries",
            "attempts after a run's first: recoveries that got as far as launching",
            s.recoveries,
        )
        yield GaugeMetricFamily(
            "corral_controller_up", "1 while a controller runs", int(s.controller_running)
        )
        loop = s.controller_loop
        if loop is not None:
            yield HistogramMetricFamily(
                "corral_controller_tick_seconds",
                "how long one pass of the controller's loop took",
                buckets=[(str(le), n) for le, n in loop.buckets],
                sum_value=loop.sum_s,
            )
            yield GaugeMetricFamily(
                "corral_controller_active_runs",
                "runs the controller's last pass handled",
                loop.active_runs,
            )
        yield from _gpu_families([s.gpus.host, *s.gpus.nodes])
        if s.queues is not None:
            queue = GaugeMetricFamily(
                "corral_queue_length", "runs waiting in a queue", labels=["provider", "queue"]
            )
            for q in s.queues:
                queue.add_metric([q.provider, q.queue], q.length)
            yield queue
            readable = GaugeMetricFamily(
                "corral_queue_readable",
                "1 when the provider's queues could be read now",
                labels=["provider"],
            )
            for name, ok in s.queue_providers.items():
                readable.add_metric([name], int(ok))
            yield readable


def exposition(snap: MetricsSnapshot) -> bytes:
    """The snapshot as Prometheus text (``text/plain; version=0.0.4``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(snap))
    return generate_latest(registry)
