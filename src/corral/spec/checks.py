"""Checks across stages: unique names, the ``needs`` graph (dangling, self, cycles), and the
GPUs each stage asks for against ``resources.gpus``.

Each check returns ``(loc, message)`` pairs with ``loc`` relative to the job spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from corral.spec.gpus import StageGpus
from corral.spec.suggest import did_you_mean


class Stage(Protocol):
    """What the checks read of a stage (``corral.spec.job.Stage`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def needs(self) -> list[str]: ...
    @property
    def gpus(self) -> StageGpus: ...


Problem = tuple[tuple[str | int, ...], str]
#: A stage as the ``needs`` graph sees it: its name (None: it has no usable name) and needs
#: (items that are not strings are skipped; their index is kept for the location).
Node = tuple[str | None, Sequence[object]]


def stage_problems(stages: Sequence[Stage], gpu_max: int) -> list[Problem]:
    return graph_problems([(s.name, s.needs) for s in stages]) + _gpus(stages, gpu_max)


def graph_problems(nodes: Sequence[Node]) -> list[Problem]:
    """Duplicate names, dangling or self ``needs`` and cycles among ``nodes`` (in order)."""
    return _names(nodes) + _needs(nodes) + _cycles(nodes)


def raw_graph_problems(data: object) -> list[Problem]:
    """:func:`graph_problems` of the stages as written, for a spec that failed validation
    elsewhere: a bad ``needs`` is reported in the same run as every other error."""
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, list):
        return []
    nodes: list[Node] = []
    for stage in stages:
        if not isinstance(stage, dict):
            nodes.append((None, []))
            continue
        name, needs = stage.get("name"), stage.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        nodes.append(
            (name if isinstance(name, str) else None, needs if isinstance(needs, list) else [])
        )
    return graph_problems(nodes)


def _names(nodes: Sequence[Node]) -> list[Problem]:
    first: dict[str, int] = {}
    out: list[Problem] = []
    for i, (name, _) in enumerate(nodes):
        if name is None:
            continue
        if name in first:
            j = first[name]
            out.append((("stages", i, "name"), f"duplicate stage name '{name}' (see stages[{j}])"))
        else:
            first[name] = i
    return out


def _needs(nodes: Sequence[Node]) -> list[Problem]:
    names = [name for name, _ in nodes if name is not None]
    out: list[Problem] = []
    for i, (name, needs) in enumerate(nodes):
        for j, need in enumerate(needs):
            if not isinstance(need, str):
                continue
            loc = ("stages", i, "needs", j)
            if need == name:
                out.append((loc, f"stage '{name}' needs itself"))
            elif need not in names:
                others = [n for n in names if n != name]
                out.append((loc, f"unknown stage '{need}'{did_you_mean(need, others)}"))
    return out


def _cycles(nodes: Sequence[Node]) -> list[Problem]:
    """One problem per distinct cycle, named in dependency order: ``a -> b -> a``."""
    index = {name: i for i, (name, _) in reversed(list(enumerate(nodes))) if name is not None}
    edges = {
        name: [n for n in nodes[i][1] if isinstance(n, str) and n in index and n != name]
        for name, i in index.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    seen: set[frozenset[str]] = set()
    out: list[Problem] = []
    for root, _ in nodes:  # depth first, without recursion (a chain may be thousands long)
        if root is None or root in state:
            continue
        state[root] = 1
        path, pending = [root], [iter(edges[root])]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt) :]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    start = min(range(len(cycle)), key=lambda k: index[cycle[k]])
                    ordered = cycle[start:] + cycle[:start]
                    text = " -> ".join([*ordered, ordered[0]])
                    out.append(
                        (("stages", index[ordered[0]], "needs"), f"dependency cycle: {text}")
                    )
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                pending.append(iter(edges[nxt]))
    return out


def _gpus(stages: Sequence[Stage], gpu_max: int) -> list[Problem]:
    out: list[Problem] = []
    for i, stage in enumerate(stages):
        gpus = stage.gpus
        loc: tuple[str | int, ...] = ("stages", i, "gpus")
        asks = len(gpus) if isinstance(gpus, list) else gpus if isinstance(gpus, int) else 0
        if asks and gpu_max == 0:
            out.append(
                (loc, f"stage '{stage.name}' asks for GPUs but resources.gpus asks for none")
            )
        elif isinstance(gpus, int) and gpus > gpu_max:
            out.append(
                (
                    loc,
                    f"stage '{stage.name}' asks for {gpus} GPUs but resources.gpus gives at "
                    f"most {gpu_max}",
                )
            )
        elif isinstance(gpus, list):
            seen: set[int] = set()
            for j, idx in enumerate(gpus):
                if idx in seen:
                    out.append(
                        ((*loc, j), f"stage '{stage.name}': GPU index {idx} is listed twice")
                    )
                elif idx >= gpu_max:
                    out.append(
                        (
                            (*loc, j),
                            f"stage '{stage.name}': GPU index {idx} is out of range "
                            f"(resources.gpus gives at most {gpu_max}: indices 0..{gpu_max - 1})",
                        )
                    )
                seen.add(idx)
    return out
