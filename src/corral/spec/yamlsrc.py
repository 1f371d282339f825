"""Parse YAML and remember where every key and list item is (1-based line numbers).

This module is the only place corral parses spec YAML (files and ``--set`` values). Before
anything is built, a pass over the parser's events refuses what would make building it
explode: aliases that multiply the document past :data:`MAX_VALUES` values (a "billion laughs"
bomb), an anchor used inside itself, nesting deeper than :data:`MAX_DEPTH`, and integers too
long for Python to convert.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

import yaml

from corral.errors import SpecError
from corral.spec.report import OVERRIDE_SOURCE, format_error
from corral.spec.text import as_typed, undecodable

Path_ = tuple[str | int, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"
#: The largest spec (file, text or one ``--set`` value) in UTF-8 bytes; checked before parsing.
MAX_SPEC_BYTES = 1024 * 1024
#: Most values (scalars and collections, aliases counted expanded) one document may hold.
MAX_VALUES = 100_000
#: Deepest nesting of lists and mappings (a spec needs about 5; deeper input crashes parsers).
MAX_DEPTH = 64
#: libyaml's parser when PyYAML was built with it (about 10x faster), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Parsed:
    """A YAML document, the line of each path in it, and the text of plain scalars."""

    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    raw: dict[Path_, str] = field(default_factory=dict)
    problems: list[dict[str, Any]] = field(default_factory=list)


class _Invalid(Exception):
    """Input refused before or while parsing: ``line`` (1-based, or None) and why."""

    def __init__(self, line: int | None, reason: str, *, syntax: bool = False):
        super().__init__(reason)
        self.line = line
        self.reason = reason
        self.syntax = syntax  # the YAML parser's own complaint


def parse_yaml(text: str, source: str) -> Parsed:
    """Parse one YAML document. Invalid YAML raises :class:`SpecError` with the YAML's line;
    duplicate keys are recorded in ``problems`` (PyYAML would silently keep the last one)."""
    try:
        return _parse(text, source)
    except _Invalid as bad:
        message = f"invalid YAML: {bad.reason}" if bad.syntax else bad.reason
        err = {"file": source, "line": bad.line, "field": "", "message": message}
        raise SpecError(format_error(err), errors=[err])


def parse_value(text: str) -> Any:
    """One ``--set`` value parsed as YAML under the same bounds as a spec file.

    Raises ``ValueError`` with a one-line reason: "not valid YAML: ..." or "refused: ..."."""
    size = utf8_size(text)
    if size > MAX_SPEC_BYTES:
        raise ValueError(f"refused: it is {size:,} bytes, more than {MAX_SPEC_BYTES:,} (1 MiB)")
    try:
        return _parse(text, OVERRIDE_SOURCE).data
    except _Invalid as bad:
        raise ValueError(f"{'not valid YAML' if bad.syntax else 'refused'}: {bad.reason}")


def utf8_size(text: str) -> int:
    """``text``'s size in UTF-8 bytes where it may pass :data:`MAX_SPEC_BYTES`, else a bound
    below it (lone surrogates, from undecodable input, count as 3 bytes)."""
    if 4 * len(text) <= MAX_SPEC_BYTES:
        return len(text)  # at most 4 bytes a character: under the limit whatever they are
    return len(text.encode("utf-8", "surrogatepass"))


def _parse(text: str, source: str) -> Parsed:
    index = undecodable(text)
    if index is not None:
        line: int | None = text.count("\n", 0, index) + 1
        raise _Invalid(line, f"not UTF-8 text: '{as_typed(text[index])}' cannot be decoded")
    loader = _LOADER(text)
    try:
        _check_shape(text)
        node = loader.get_single_node()
        problems = _duplicates(node, source) if node is not None else []
        data = loader.construct_document(node) if node is not None else None
        parsed = Parsed(data=data, problems=problems)
        if node is not None:
            _walk(loader, node, (), parsed, set())
        return parsed
    except yaml.MarkedYAMLError as exc:
        line, problem = _where_it_began(exc)
        raise _Invalid(line, problem, syntax=True)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, unmarked
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        raise _Invalid(line, str(exc).splitlines()[0], syntax=True)
    except yaml.YAMLError as exc:
        raise _Invalid(None, str(exc), syntax=True)
    finally:
        loader.dispose()


_CONTEXT_RE = re.compile(r"^while (?:scanning|parsing|constructing) (.+)$")


def _where_it_began(exc: yaml.MarkedYAMLError) -> tuple[int | None, str]:
    """The line and text of a YAML error, at the construct it is in where the parser says
    (an unterminated quote on line 3 is reported on line 3, not at the end of the file)."""
    problem = exc.problem or "unknown problem"
    where = exc.problem_mark or exc.context_mark
    line = where.line + 1 if where is not None else None
    if not exc.context:
        return line, problem
    match = _CONTEXT_RE.match(exc.context)
    construct = f"in {match.group(1)}" if match else exc.context
    began = exc.context_mark.line + 1 if exc.context_mark is not None else None
    if began is None or began == line:
        return line, f"{construct}: {problem}"
    return began, f"{construct} begun here: {problem} (at line {line})"


def _check_shape(text: str) -> None:
    """Raise :class:`_Invalid` for input whose expansion or nesting is out of bounds.

    Counts values as the composer would build them: an alias counts as every value under
    its anchor. Works on the event stream, so it never builds anything itself."""
    loader = _LOADER(text)
    sizes: dict[str, int] = {}  # anchor -> values under it, expanded
    open_: list[tuple[str | None, int]] = []  # collections begun: (anchor, count before)
    count = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            line = event.start_mark.line + 1
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                open_.append((event.anchor, count))
                count += 1
                if len(open_) > MAX_DEPTH:
                    raise _Invalid(line, f"lists and mappings nested more than {MAX_DEPTH} deep")
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                anchor, before = open_.pop()
                if anchor is not None:
                    sizes[anchor] = count - before
            elif isinstance(event, yaml.ScalarEvent):
                count += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
                _check_digits(event, line)
            elif isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for anchor, _ in open_):
                    reason = f"alias *{event.anchor} is used inside its own anchor &{event.anchor}"
                    raise _Invalid(line, reason)
                count += sizes.get(event.anchor or "", 0)  # an undefined one: the composer says
            if count > MAX_VALUES:
                reason = (
                    f"the document holds more than {MAX_VALUES:,} values once its aliases "
                    "(*name) are expanded"
                )
                raise _Invalid(line, reason)
    finally:
        loader.dispose()


def _check_digits(event: yaml.ScalarEvent, line: int) -> None:
    """A plain integer longer than Python converts (its limit, 4300 digits by default)."""
    if event.style or not event.implicit[0]:
        return
    digits = event.value.lstrip("+-").replace("_", "")
    limit = sys.get_int_max_str_digits()
    if limit and len(digits) > limit and digits.isdigit():
        raise _Invalid(line, f"an integer of {len(digits):,} digits is too long")


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
