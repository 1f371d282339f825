"""``--set key.path=value`` overrides, applied to the parsed YAML before validation.

The value is parsed as YAML (``--set resources.gpus=L40S:2``, ``--set budget.max_cost_usd=20``),
except that a field holding free text keeps the text as typed (``--set env.VERSION=1.10``).
A stage is addressed by name or by index: ``stages.train.run`` or ``stages.0.run``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from corral.spec.report import OVERRIDE_SOURCE, Locator, spec_error
from corral.spec.schema import dict_value, field_annotation, is_text, list_item, model_of
from corral.spec.suggest import did_you_mean
from corral.spec.text import as_typed, undecodable
from corral.spec.yamlsrc import parse_value

Loc = tuple[str | int, ...]
FORM = "KEY.PATH=VALUE, e.g. resources.gpus=L40S:2"


class _Bad(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def apply_overrides(
    data: dict[str, Any], overrides: Iterable[str], root: type[BaseModel], where: Locator
) -> dict[str, Any]:
    """A copy of ``data`` with every override applied; bad overrides raise one SpecError."""
    out = copy.deepcopy(data)
    errors: list[dict[str, Any]] = []
    for text in overrides:
        key, sep, raw = text.partition("=")
        key = key.strip()
        parts = key.split(".")
        not_text = _not_utf8(key, raw)
        if not_text is not None:
            field = "" if undecodable(key) is not None else key
            errors.append(
                {"file": OVERRIDE_SOURCE, "line": None, "field": field, "message": not_text}
            )
            continue
        if not sep or not key or not all(parts):
            message = f"malformed override '{text}' (expected {FORM})"
            errors.append({"file": OVERRIDE_SOURCE, "line": None, "field": "", "message": message})
            continue
        try:
            loc = _set(out, parts, raw, root)
        except _Bad as bad:
            errors.append(
                {"file": OVERRIDE_SOURCE, "line": None, "field": key, "message": bad.message}
            )
            continue
        where.mark_override(loc)
    if errors:
        raise spec_error(errors)
    return out


def _not_utf8(key: str, raw: str) -> str | None:
    """Why the override cannot be used if its key or value is not UTF-8 text, else None.
    The value is never shown (it may be a secret), only the byte at fault."""
    if undecodable(key) is not None:
        return f"the key '{as_typed(key)}' is not UTF-8 text"
    index = undecodable(raw)
    if index is not None:
        shown = as_typed(raw[index])
        return f"the value is not UTF-8 text ('{shown}' at position {index} cannot be decoded)"
    return None


def _value(raw: str, annotation: Any) -> Any:
    try:
        value = parse_value(raw)
    except ValueError as exc:
        raise _Bad(f"the value is {exc}")
    if is_text(annotation) and (not raw.strip() or isinstance(value, (bool, int, float))):
        return raw.strip()
    return value


def _set(data: dict[str, Any], parts: list[str], raw: str, root: type[BaseModel]) -> Loc:
    """Put the value at the path; return the concrete location (stage names -> indices)."""
    node: Any = data
    annotation: Any = root
    loc: list[str | int] = []
    i = 0
    while i < len(parts):
        part, last = parts[i], i == len(parts) - 1
        shown = ".".join(str(p) for p in loc) or "the top level"
        model = model_of(annotation)
        if model is not None:
            if not isinstance(node, dict):
                raise _Bad(f"{shown} is a single value: set it whole, e.g. --set {shown}=...")
            if part not in model.model_fields:
                hint = did_you_mean(part, model.model_fields)
                raise _Bad(f"unknown key '{part}' in {shown}{hint}")
            child = field_annotation(model, part)
            if last:
                node[part] = _value(raw, child)
            elif node.get(part) is None:
                if model_of(child) is None and dict_value(child) is None:
                    raise _Bad(f"{'.'.join(parts[: i + 1])} is not set in the spec")
                node[part] = {}
            node, annotation = node[part], child
            loc.append(part)
            i += 1
        elif dict_value(annotation) is not None:
            if not last:
                raise _Bad(f"'{part}' in {shown} is a single value, it has no key '{parts[i + 1]}'")
            if not isinstance(node, dict):
                raise _Bad(f"{shown} is not a mapping")
            node[part] = _value(raw, dict_value(annotation))
            loc.append(part)
            i += 1
        elif list_item(annotation) is not None and isinstance(node, list):
            item = list_item(annotation)
            index, used = _find_item(node, parts[i:], shown)
            i += used
            if i == len(parts):
                node[index] = _value(raw, item)
            node, annotation = node[index], item
            loc.append(index)
        else:
            raise _Bad(f"{shown} is a single value, it has no key '{part}'")
    return tuple(loc)


def _find_item(items: list[Any], rest: list[str], shown: str) -> tuple[int, int]:
    """Index of the list item named by ``rest`` (an index, or a name that may contain dots),
    and how many parts of ``rest`` it used."""
    if rest[0].isdigit():
        index = int(rest[0])
        if index >= len(items):
            raise _Bad(f"{shown} has no item {index} (it has {len(items)})")
        return index, 1
    names = [it.get("name") for it in items if isinstance(it, dict)]
    for used in range(len(rest), 0, -1):
        wanted = ".".join(rest[:used])
        for index, item in enumerate(items):
            if isinstance(item, dict) and item.get("name") == wanted:
                return index, used
    raise _Bad(f"{shown} has no item named '{rest[0]}'{did_you_mean(rest[0], names)}")
