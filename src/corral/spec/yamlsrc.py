"""Parse YAML and remember where every key and list item is (1-based line numbers).

This module is the only place corral parses spec YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from corral.errors import SpecError
from corral.spec.report import format_error

Path_ = tuple[str | int, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"
#: libyaml's parser when PyYAML was built with it (about 10x faster), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Parsed:
    """A YAML document, the line of each path in it, and the text of plain scalars."""

    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    raw: dict[Path_, str] = field(default_factory=dict)
    problems: list[dict[str, Any]] = field(default_factory=list)


def parse_yaml(text: str, source: str) -> Parsed:
    """Parse one YAML document. Invalid YAML raises :class:`SpecError` with the YAML's line;
    duplicate keys are recorded in ``problems`` (PyYAML would silently keep the last one)."""
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        problems = _duplicates(node, source) if node is not None else []
        data = loader.construct_document(node) if node is not None else None
        parsed = Parsed(data=data, problems=problems)
        if node is not None:
            _walk(loader, node, (), parsed, set())
        return parsed
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and problem.startswith("but "):
            problem = f"{exc.context}, {problem}"
        raise _yaml_error(source, line, f"invalid YAML: {problem}")
    except yaml.YAMLError as exc:
        raise _yaml_error(source, None, f"invalid YAML: {exc}")
    finally:
        loader.dispose()


def _yaml_error(source: str, line: int | None, message: str) -> SpecError:
    err = {"file": source, "line": line, "field": "", "message": message}
    return SpecError(format_error(err), errors=[err])


def _duplicates(node: yaml.Node, source: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stack, seen_nodes = [node], set()
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            keys: dict[tuple[str, str], int] = {}
            for key, value in current.value:
                stack.append(value)
                if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                    continue
                ident = (key.tag, key.value)
                line = key.start_mark.line + 1
                if ident in keys:
                    message = f"duplicate key '{key.value}' (first at line {keys[ident]})"
                    out.append({"file": source, "line": line, "field": "", "message": message})
                else:
                    keys[ident] = line
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return sorted(out, key=lambda e: e["line"])


def _walk(loader: Any, node: yaml.Node, path: Path_, out: Parsed, busy: set) -> None:
    if id(node) in busy:  # a recursive alias: stop here
        return
    out.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode):
        if not node.style:  # plain (None in PyYAML's parser, "" in libyaml's)
            out.raw[path] = node.value
        return
    busy.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            try:
                key = loader.construct_object(key_node, deep=True)
                hash(key)
            except (yaml.YAMLError, TypeError):
                continue
            child = (*path, key)
            out.lines[child] = key_node.start_mark.line + 1
            _walk(loader, value_node, child, out, busy)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(loader, item, (*path, i), out, busy)
    busy.discard(id(node))
