"""GPU monitoring (``GET /api/v1/monitoring/gpu``, the dashboard's GPU panel, ``/metrics``):
what every GPU of this machine and of each live run's node reads now, and a health verdict
from :mod:`corral.service.gpu_health`'s thresholds.

This machine's GPUs are read through NVML (or a declared inventory, ``CORRAL_FAKE_GPUS``); a
node's through its agent (``GET /gpus``, with the agent token only the controller's home can
derive), all nodes at once, each within ``timeout`` seconds. A node that does not answer is
an issue of its own, never a failed report.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import Field

from corral import gpu
from corral.errors import CorralError
from corral.service._store import using
from corral.service.gpu_health import GpuThresholds, Verdict, judge, thresholds_from_env
from corral.service.views import View
from corral.store import AttemptRecord, RunRecord, Store
from corral.store.states import RunState

#: seconds a node's agent has to answer
NODE_TIMEOUT_S = 3.0
#: nodes asked at the same time
MAX_PARALLEL = 16


class GpuView(View):
    """One GPU as it reads now."""

    index: int
    id: str
    name: str
    uuid: str = ""
    memory_used_mb: int
    memory_total_mb: int
    memory_used_pct: float | None
    utilization_pct: float
    temperature_c: float | None
    processes: int | None
    ecc_uncorrected: int | None
    ecc_corrected: int | None
    fake: bool = False
    #: the running stage that holds it (nodes only)
    stage: str | None = None
    #: seconds it has read 0 % while that stage runs (nodes only; None: it works or is free)
    zero_util_s: float | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> GpuView:
        used, total = int(row.get("memory_used_mb") or 0), int(row.get("memory_total_mb") or 0)
        pct = round(100.0 * used / total, 1) if total > 0 else None
        fields = {k: row[k] for k in cls.model_fields if k in row and k != "memory_used_pct"}
        return cls(**{**fields, "memory_used_pct": pct})


class MachineGpus(View):
    """The GPUs of one machine: this one (``kind: host``) or a live run's node (``node``)."""

    kind: Literal["host", "node"]
    name: str
    run_id: str | None = None
    run_name: str | None = None
    attempt: int | None = None
    gpus: list[GpuView]
    health: Verdict
    #: why the node's GPUs could not be read (its agent did not answer); None when they were
    error: str | None = None


class GuideMemory(View):
    used_gb: float
    total_gb: float
    utilization_percent: float | None


class GuideProcesses(View):
    count: int | None


class GuideGpu(View):
    """One GPU in the shape of the Celery GPU-workers guide's ``/api/v1/monitoring/gpu``
    (``index``, ``name``, ``memory{used_gb,total_gb,utilization_percent}``,
    ``utilization_percent``, ``temperature_c``, ``processes{count}``), with corral's
    ``machine`` (this machine's host name, or a run's node) and ``run_id`` beside them."""

    index: int
    name: str
    memory: GuideMemory
    utilization_percent: float
    temperature_c: float | None
    processes: GuideProcesses
    machine: str
    run_id: str | None = None

    @classmethod
    def of(cls, gpu: GpuView, machine: MachineGpus) -> GuideGpu:
        return cls(
            index=gpu.index,
            name=gpu.name,
            memory=GuideMemory(
                used_gb=round(gpu.memory_used_mb / 1024, 2),
                total_gb=round(gpu.memory_total_mb / 1024, 2),
                utilization_percent=gpu.memory_used_pct,
            ),
            utilization_percent=gpu.utilization_pct,
            temperature_c=gpu.temperature_c,
            processes=GuideProcesses(count=gpu.processes),
            machine=machine.name,
            run_id=machine.run_id,
        )


class GpuReport(View):
    """Every machine's GPUs and the verdict over all of them: ``gpus`` and ``health`` in the
    Celery GPU-workers guide's shape (every GPU of this machine, then of each node), ``host``
    and ``nodes`` with corral's fuller readings."""

    gpus: list[GuideGpu]
    health: Verdict
    host: MachineGpus
    nodes: list[MachineGpus]
    thresholds: GpuThresholds = Field(description="the thresholds the verdicts used")


def host_gpus(thresholds: GpuThresholds, environ: Mapping[str, str] | None = None) -> MachineGpus:
    """This machine's GPUs (every GPU NVML sees, or the declared inventory)."""
    rows = [s.to_dict() for s in gpu.sample(environ=environ)]
    return MachineGpus(
        kind="host",
        name=socket.gethostname(),
        gpus=[GpuView.of(r) for r in rows],
        health=judge(rows, thresholds),
    )


def _node_name(run: RunRecord) -> str:
    return f"{run.name} (attempt {run.attempt})"


def node_gpus(
    run: RunRecord, attempt: AttemptRecord, thresholds: GpuThresholds, *, timeout: float
) -> MachineGpus:
    """The GPUs of the node running ``attempt``, through its agent."""
    from corral.control.agent_client import AgentClient  # httpx: only when a node is asked
    from corral.control.tokens import agent_token

    name = _node_name(run)
    ident = {"kind": "node", "name": name, "run_id": run.id, "run_name": run.name}
    try:
        if not attempt.endpoint:
            raise CorralError("its agent's endpoint is not known yet")
        client = AgentClient(attempt.endpoint, agent_token(run.id, attempt.number), timeout=timeout)
        try:
            rows = list(client.gpus().get("gpus") or [])
        finally:
            client.close()
    except CorralError as e:
        return MachineGpus(
            **ident,
            attempt=attempt.number,
            gpus=[],
            health=Verdict.of([], [f"{name}: GPUs not readable: {e}"]),
            error=str(e),
        )
    return MachineGpus(
        **ident,
        attempt=attempt.number,
        gpus=[GpuView.of(r) for r in rows],
        health=judge(rows, thresholds, where=name),
    )


def live_nodes(store: Store) -> list[tuple[RunRecord, AttemptRecord]]:
    """(run, current attempt) of every run whose stages run on a node now."""
    out = []
    for run in store.list_runs(states=[RunState.RUNNING.value]):
        try:
            out.append((run, store.get_attempt(run.id, run.attempt)))
        except CorralError:  # the attempt row is written just after the state: next time
            continue
    return out


def gpu_report(
    *,
    store: Store | None = None,
    thresholds: GpuThresholds | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = NODE_TIMEOUT_S,
) -> GpuReport:
    """What every GPU of this machine and of each running run's node reads now, each machine
    with its verdict and one over all of them. ``thresholds`` default to
    ``CORRAL_GPU_THRESHOLDS``'s (BadInput naming the key when that is malformed)."""
    limits = thresholds if thresholds is not None else thresholds_from_env(environ)
    host = host_gpus(limits, environ)
    with using(store) as st:
        live = live_nodes(st)
    nodes: list[MachineGpus] = []
    if live:
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(live))) as pool:
            nodes = list(
                pool.map(lambda ra: node_gpus(ra[0], ra[1], limits, timeout=timeout), live)
            )
    health = Verdict.merged([host.health, *(n.health for n in nodes)])
    guide = [GuideGpu.of(g, m) for m in (host, *nodes) for g in m.gpus]
    return GpuReport(gpus=guide, health=health, host=host, nodes=nodes, thresholds=limits)


def run_gpus(
    ref: str,
    *,
    store: Store | None = None,
    thresholds: GpuThresholds | None = None,
    timeout: float = NODE_TIMEOUT_S,
) -> MachineGpus | None:
    """The GPUs of the node the run's stages run on now; None unless it is RUNNING."""
    limits = thresholds if thresholds is not None else thresholds_from_env()
    with using(store) as st:
        run = st.get_run(ref)
        if run.state != RunState.RUNNING.value or not run.attempt:
            return None
        try:
            attempt = st.get_attempt(run.id, run.attempt)
        except CorralError:
            return None
    return node_gpus(run, attempt, limits, timeout=timeout)
