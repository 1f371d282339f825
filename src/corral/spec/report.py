"""Turn validation failures into located spec errors and one readable :class:`SpecError`.

An error is a dict ``{file, line, field, message}``. ``field`` is a path such as
``stages[1].needs[0]``; for a problem with a key (unknown, missing, duplicate) it is the
mapping that holds the key (``""`` at the top level). ``line`` is 1-based, the line of the
offending key or item, else of the closest enclosing one, or None for a ``--set`` value.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from corral.errors import SpecError
from corral.spec.fields import Problems
from corral.spec.schema import keys_at
from corral.spec.suggest import did_you_mean
from corral.spec.units import describe, type_name

Loc = tuple[str | int, ...]
OVERRIDE_SOURCE = "--set"


def format_loc(loc: Loc) -> str:
    """``("stages", 1, "needs")`` -> ``"stages[1].needs"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class Locator:
    """Finds the file and line of a path: in the YAML file, or in a ``--set`` override."""

    def __init__(self, source: str, lines: dict[Loc, int] | None = None):
        self.source = source
        self.lines = dict(lines or {})
        self.overridden: set[Loc] = set()

    def mark_override(self, loc: Loc) -> None:
        """``loc`` (and everything under it) now comes from a ``--set`` override."""
        self.lines = {k: v for k, v in self.lines.items() if k[: len(loc)] != loc}
        self.overridden.add(loc)

    def find(self, loc: Loc) -> tuple[str, int | None]:
        for n in range(len(loc), -1, -1):
            prefix = loc[:n]
            if prefix in self.overridden:
                return OVERRIDE_SOURCE, None
            if prefix in self.lines:
                return self.source, self.lines[prefix]
        return self.source, None

    def error(self, loc: Loc, message: str, *, field_loc: Loc | None = None) -> dict[str, Any]:
        file, line = self.find(loc)
        shown = format_loc(loc if field_loc is None else field_loc)
        return {"file": file, "line": line, "field": shown, "message": message}


_SENSITIVE = ("env", "secret", "secrets")
_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "is_instance_of": "a path",
    "none_required": "null",
}
_BOUNDS = {
    "greater_than": ">",
    "greater_than_equal": ">=",
    "less_than": "<",
    "less_than_equal": "<=",
}


def _shown(value: Any, loc: Loc) -> str:
    """``'eight'`` or ``3``; values under env/secret keys are never shown, only their type."""
    if any(isinstance(p, str) and p.lower() in _SENSITIVE for p in loc):
        return type_name(value)
    return describe(value)


def translate(exc: ValidationError, root: type[BaseModel], where: Locator) -> list[dict[str, Any]]:
    """One located error per problem in ``exc`` (``root`` is the validated model class)."""
    out: list[dict[str, Any]] = []
    for err in exc.errors(include_url=False):
        loc, kind, ctx = tuple(err["loc"]), err["type"], err.get("ctx") or {}
        value = err.get("input")
        if kind == "value_error" and isinstance(ctx.get("error"), Problems):
            for sub, message in ctx["error"].problems:
                out.append(where.error((*loc, *sub), message))
        elif kind == "value_error":
            out.append(where.error(loc, str(ctx.get("error", err["msg"]))))
        elif kind in ("extra_forbidden", "invalid_key", "missing") and not loc:
            out.append(where.error(loc, err["msg"]))
        elif kind == "extra_forbidden":
            hint = did_you_mean(loc[-1], keys_at(root, loc[:-1]))
            out.append(where.error(loc, f"unknown key '{loc[-1]}'{hint}", field_loc=loc[:-1]))
        elif kind == "invalid_key":
            message = f"invalid key {describe(loc[-1])} (keys are strings)"
            out.append(where.error(loc, message, field_loc=loc[:-1]))
        elif kind == "missing":
            out.append(where.error(loc[:-1], f"missing required key '{loc[-1]}'"))
        elif kind in _TYPE_WORDS:
            message = f"expected {_TYPE_WORDS[kind]}, got {_shown(value, loc)}"
            out.append(where.error(loc, message))
        elif kind == "literal_error":
            choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
            hint = did_you_mean(value, choices) if isinstance(value, str) else ""
            message = f"expected {ctx.get('expected')}, got {_shown(value, loc)}{hint}"
            out.append(where.error(loc, message))
        elif kind in _BOUNDS:
            bound = next(iter(ctx.values()), "?")
            if isinstance(bound, float) and bound.is_integer():
                bound = int(bound)
            message = f"must be {_BOUNDS[kind]} {bound}, got {_shown(value, loc)}"
            out.append(where.error(loc, message))
        elif kind in ("too_short", "string_too_short"):
            out.append(where.error(loc, "must not be empty"))
        else:
            out.append(where.error(loc, err["msg"]))
    return out


def format_error(err: dict[str, Any]) -> str:
    """``corral.yaml:12: stages[1].needs: unknown stage 'trian' (did you mean 'train'?)``.

    One line whatever the spec held: characters that are not printable (newlines, the record
    separators ``str.splitlines`` breaks at, other control characters) are shown escaped."""
    where = err["file"] if err.get("line") is None else f"{err['file']}:{err['line']}"
    field = f"{err['field']}: " if err.get("field") else ""
    return _one_line(f"{where}: {field}{err['message']}")


def _one_line(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def spec_error(errors: list[dict[str, Any]]) -> SpecError:
    """One :class:`SpecError` listing every problem, one line each, in file order."""
    ordered = sorted(
        errors, key=lambda e: (e["file"] == OVERRIDE_SOURCE, e.get("line") or 0, e["field"])
    )
    unique: list[dict[str, Any]] = []
    for err in ordered:
        if err not in unique:
            unique.append(err)
    return SpecError("\n".join(format_error(e) for e in unique), errors=unique)
