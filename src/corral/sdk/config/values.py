"""Values of config fields: parsing ``--set`` text and checking Python values against the
dataclass field types, and setting dotted keys (see :mod:`corral.sdk.config` for the rules)."""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import os
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from corral.errors import BadInput

__all__ = [
    "Mismatch",
    "check_all",
    "coerce",
    "default_instance",
    "field_types",
    "plain",
    "set_key",
    "suggest",
    "type_name",
]

T = TypeVar("T")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null"}


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def default_instance(cls: type[T]) -> T:
    try:
        return cls()
    except TypeError as e:
        raise BadInput(f"{cls.__name__}: every config field needs a default ({e})")


def field_types(obj: Any) -> dict[str, Any]:
    cls = type(obj)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls)}


def suggest(word: str, options: Iterable[str]) -> str:
    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{found[0]}'?)" if found else ""


def type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


class Mismatch(Exception):
    """A value does not fit a type (message: what was expected)."""


def coerce(value: Any, tp: Any, parse_text: bool) -> Any:
    """``value`` converted to ``tp``; strings are parsed when ``parse_text`` (CLI input)."""
    if tp is Any or tp is object or isinstance(tp, (str, typing.ForwardRef)):
        return _parse_json_or_text(value) if parse_text and isinstance(value, str) else value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return coerce(value, args[0], parse_text)
    if origin in (typing.Union, types.UnionType):
        is_none = value is None or (
            parse_text and isinstance(value, str) and value.strip().lower() in _NONE
        )
        if is_none and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, parse_text)
            except Mismatch:
                continue
        raise Mismatch(type_name(tp))
    if origin is typing.Literal:
        for option in args:
            if value == option or (isinstance(value, str) and str(option) == value):
                return option
        raise Mismatch("one of " + ", ".join(repr(a) for a in args))
    if origin in (list, tuple, set, frozenset, Sequence):
        items = _as_list(value, parse_text)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(items) != len(args):
                raise Mismatch(f"{len(args)} items")
            return tuple(coerce(v, a, parse_text) for v, a in zip(items, args, strict=True))
        item_tp = args[0] if args else Any
        out = [coerce(v, item_tp, parse_text) for v in items]
        return out if origin in (list, Sequence) else origin(out)
    if origin is dict:
        if parse_text and isinstance(value, str):
            value = _json(value, "a JSON object")
        if not isinstance(value, dict):
            raise Mismatch("a JSON object")
        kt, vt = args if args else (Any, Any)
        return {coerce(k, kt, True): coerce(v, vt, parse_text) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if parse_text and isinstance(value, str):
            value = _json(value, "a JSON object")
        if not isinstance(value, dict):
            raise Mismatch(f"{tp.__name__} (a JSON object of its fields)")
        obj = default_instance(tp)
        for k, v in value.items():
            set_key(obj, k, v, parse_text)
        return obj
    if isinstance(tp, type):
        return _scalar(value, tp, parse_text)
    return value


def _scalar(value: Any, tp: type, parse_text: bool) -> Any:
    text = value.strip() if parse_text and isinstance(value, str) else None
    if tp is bool:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise Mismatch("a boolean (true/false)")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text is not None:
            try:
                return int(text)
            except ValueError:
                pass
        raise Mismatch("an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if text is not None:
            try:
                return float(text)
            except ValueError:
                pass
        raise Mismatch("a number")
    if tp is str:
        if isinstance(value, str):
            if parse_text and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
                return text[1:-1]
            return value
        raise Mismatch("a string")
    if issubclass(tp, enum.Enum):
        for member in tp:
            if value is member or value == member.value or value == member.name:
                return member
            if isinstance(value, str) and str(member.value) == value:
                return member
        raise Mismatch("one of " + ", ".join(m.name for m in tp))
    if issubclass(tp, os.PathLike) or tp is Path:
        if isinstance(value, (str, os.PathLike)):
            return tp(value)
        raise Mismatch("a path")
    if isinstance(value, tp):
        return value
    raise Mismatch(tp.__name__)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise Mismatch(what)


def _parse_json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _as_list(value: Any, parse_text: bool) -> list[Any]:
    if parse_text and isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = _json(text, "a JSON array")
        else:
            return [] if not text else [p.strip() for p in text.split(",")]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    raise Mismatch("a list")


def set_key(cfg: Any, key: str, value: Any, parse_text: bool) -> None:
    """Set the dotted ``key`` below ``cfg``, checking the name and the type."""
    parts = key.split(".")
    obj = cfg
    for depth, name in enumerate(parts):
        hints = field_types(obj)
        here = ".".join(parts[: depth + 1])
        if name not in hints:
            parent = ".".join(parts[:depth])
            options = [f"{parent}.{n}" if parent else n for n in hints]
            raise BadInput(f"unknown config key '{here}'{suggest(here, options)}")
        if depth < len(parts) - 1:
            child = getattr(obj, name)
            if not dataclasses.is_dataclass(child):
                raise BadInput(f"config key '{here}' is not a section, so '{key}' does not exist")
            obj = child
            continue
        tp = hints[name]
        try:
            coerced = coerce(value, tp, parse_text)
        except Mismatch as e:
            raise BadInput(
                f"config key '{key}': expected {e} ({type_name(tp)}), got {value!r}"
            ) from None
        object.__setattr__(obj, name, coerced)  # frozen dataclasses too


def check_all(cfg: Any, prefix: str = "") -> None:
    """Type-check every field (after ``configure()`` may have assigned anything)."""
    for name, tp in field_types(cfg).items():
        value = getattr(cfg, name)
        key = f"{prefix}{name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_all(value, key + ".")
            continue
        try:
            object.__setattr__(cfg, name, coerce(value, tp, parse_text=False))
        except Mismatch as e:
            raise BadInput(
                f"config key '{key}': expected {e} ({type_name(tp)}), got {value!r}"
            ) from None
