"""corral.control has no import cycle, counting imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import corral.control

ROOT = Path(corral.control.__file__).parent
PKG = "corral.control"
#: imports deferred on purpose (start-up speed), none of them part of a cycle
LAZY_OK = {
    ("corral.control.__main__", "corral.control.daemon"),
    ("corral.control.daemon", "corral.control.context"),
    ("corral.control.daemon", "corral.control.controller"),
    ("corral.control.daemon", "corral.control.providers"),
    ("corral.control.daemon", "corral.control.leases"),
    ("corral.control.daemon", "corral.control.bell"),
    ("corral.control.context", "corral.control.agent_client"),
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join([PKG, *parts])] = path
    return mods


def _graph() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    nested: set[tuple[str, str]] = set()
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        typing_only = {
            id(sub)
            for n in tree.body
            if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
            for sub in ast.walk(n)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                if target in mods and target != name:
                    graph[name].add(target)
                    if id(node) not in top and id(node) not in typing_only:
                        nested.add((name, target))
    return graph, nested


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return [*stack[stack.index(v) :], v]
            if v not in state and (found := visit(v)):
                return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_control_has_no_import_cycle() -> None:
    graph, _ = _graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_control_module_is_imported_inside_a_function_to_dodge_a_cycle() -> None:
    _, nested = _graph()
    assert nested <= LAZY_OK, sorted(nested - LAZY_OK)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
