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


def stage_problems(stages: Sequence[Stage], gpu_max: int) -> list[Problem]:
    return _names(stages) + _needs(stages) + _cycles(stages) + _gpus(stages, gpu_max)


def _names(stages: Sequence[Stage]) -> list[Problem]:
    first: dict[str, int] = {}
    out: list[Problem] = []
    for i, stage in enumerate(stages):
        if stage.name in first:
            j = first[stage.name]
            out.append(
                (("stages", i, "name"), f"duplicate stage name '{stage.name}' (see stages[{j}])")
            )
        else:
            first[stage.name] = i
    return out


def _needs(stages: Sequence[Stage]) -> list[Problem]:
    names = [s.name for s in stages]
    out: list[Problem] = []
    for i, stage in enumerate(stages):
        for j, need in enumerate(stage.needs):
            loc = ("stages", i, "needs", j)
            if need == stage.name:
                out.append((loc, f"stage '{stage.name}' needs itself"))
            elif need not in names:
                others = [n for n in names if n != stage.name]
                out.append((loc, f"unknown stage '{need}'{did_you_mean(need, others)}"))
    return out


def _cycles(stages: Sequence[Stage]) -> list[Problem]:
    """One problem per distinct cycle, named in dependency order: ``a -> b -> a``."""
    index = {s.name: i for i, s in reversed(list(enumerate(stages)))}
    edges = {
        name: [n for n in stages[i].needs if n in index and n != name] for name, i in index.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    seen: set[frozenset[str]] = set()
    out: list[Problem] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for nxt in edges.get(name, []):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    start = min(range(len(cycle)), key=lambda k: index[cycle[k]])
                    ordered = cycle[start:] + cycle[:start]
                    text = " -> ".join([*ordered, ordered[0]])
                    loc = ("stages", index[ordered[0]], "needs")
                    out.append((loc, f"dependency cycle: {text}"))
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[name] = 2

    for stage in stages:
        if stage.name not in state:
            visit(stage.name)
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
