"""Machines of a multi-node job: a stage's ``nodes`` (a count or ``"all"``) and the checks of
every stage's nodes and GPU pins against ``resources.nodes`` and ``resources.gpus``.

A job with ``resources.nodes: N`` runs on a gang of N machines; each stage runs on the first
``nodes`` of them (rank 0, the head, first). A stage that stays on the head node is
``nodes: 1`` (the default of a stage); ``all`` is every node of the job (the default of the
single ``run:`` form). Each node of a multi-node stage runs it with the same GPU pins, so the
pins must fit the fewest GPUs any node of the gang may have (``resources.gpus``' minimum).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from corral.spec.bounds import MAX_NODES
from corral.spec.gpus import StageGpus
from corral.spec.units import describe

StageNodes = int | Literal["all"]
STAGE_NODE_FORMS = "a count of machines such as 2, or 'all'"

Problem = tuple[tuple[str | int, ...], str]


def parse_stage_nodes(value: object) -> StageNodes:
    """A stage's nodes: a count >= 1 or ``"all"`` (checked against the job's by
    :func:`node_problems`)."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"a stage runs on at least 1 node, got {value} ({STAGE_NODE_FORMS})")
        if value > MAX_NODES:
            raise ValueError(f"must be at most {MAX_NODES}, got {value}")
        return value
    raise ValueError(f"invalid stage nodes {describe(value)} (expected {STAGE_NODE_FORMS})")


def node_count(nodes: StageNodes, job_nodes: int) -> int:
    """How many machines a stage with ``nodes`` runs on in a job of ``job_nodes``."""
    return job_nodes if nodes == "all" else nodes


class Stage(Protocol):
    """What the checks read of a stage (``corral.spec.job.Stage`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def nodes(self) -> StageNodes: ...
    @property
    def gpus(self) -> StageGpus: ...
    @property
    def needs(self) -> Sequence[str]: ...


def node_problems(
    stages: Sequence[Stage], job_nodes: int, gpu_min: int, gpu_max: int
) -> list[Problem]:
    """Stages asking for more machines than the job has, and multi-node stages whose GPUs
    cannot be the same on every node (``gpu_min`` of ``resources.gpus`` is the fewest a node
    of the gang may have)."""
    out: list[Problem] = []
    for i, stage in enumerate(stages):
        count = node_count(stage.nodes, job_nodes)
        if count > job_nodes:
            why = (
                "the job has one (set resources.nodes to run a stage on several machines)"
                if job_nodes == 1
                else f"resources.nodes gives {job_nodes}"
            )
            out.append(
                (
                    ("stages", i, "nodes"),
                    f"stage '{stage.name}' asks for {count} nodes but {why}",
                )
            )
            continue
        if count > 1 and gpu_min < gpu_max:
            out.extend(_pins(i, stage, count, gpu_min, gpu_max))
        out.extend(_needs(i, stage, count, stages, job_nodes))
    return out


def _needs(
    i: int, stage: Stage, count: int, stages: Sequence[Stage], job_nodes: int
) -> list[Problem]:
    """A stage may not need one that runs on fewer nodes: on the nodes where that one does not
    run, nothing would make this one wait for it (each node runs its own stages)."""
    counts = {s.name: node_count(s.nodes, job_nodes) for s in stages}
    for j, name in enumerate(stage.needs):
        fewer = counts.get(name)
        if fewer is not None and fewer < count:
            return [
                (
                    ("stages", i, "needs", j),
                    f"stage '{stage.name}' runs on {count} nodes but needs '{name}', which runs "
                    f"on {fewer}: run '{name}' on at least {count} nodes (each node needs its "
                    "output), or this stage on fewer",
                )
            ]
    return []


def _pins(i: int, stage: Stage, count: int, gpu_min: int, gpu_max: int) -> list[Problem]:
    """A stage on ``count`` nodes must find its GPUs on each: ``resources.gpus`` may give a
    node as few as ``gpu_min``."""
    gpus = stage.gpus
    loc: tuple[str | int, ...] = ("stages", i, "gpus")
    fewest = f"a node may have only {gpu_min} (resources.gpus asks for {gpu_min}..{gpu_max})"
    if isinstance(gpus, int) and gpus > gpu_min:
        return [
            (
                loc,
                f"stage '{stage.name}' runs on {count} nodes with {gpus} GPUs each but {fewest}",
            )
        ]
    if isinstance(gpus, list):
        for j, idx in enumerate(gpus):
            if idx >= gpu_min:
                return [
                    (
                        (*loc, j),
                        f"stage '{stage.name}' runs on {count} nodes and pins GPU index {idx} "
                        f"on each but {fewest}",
                    )
                ]
    return []
