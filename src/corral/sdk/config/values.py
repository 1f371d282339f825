"""Values of config fields: parsing ``--set`` text and checking Python values against the
dataclass field types, and setting dotted keys (see :mod:`corral.sdk.config` for the rules)."""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import enum
import inspect
import json
import numbers
import os
import sys
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from corral.errors import BadInput

__all__ = [
    "Mismatch",
    "check_all",
    "check_types",
    "coerce",
    "default_instance",
    "field_type",
    "field_types",
    "finalize",
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
    if isinstance(value, (set, frozenset)):  # JSON has no sets: a list, in a stable order
        items = [plain(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    return value


def default_instance(cls: type[T]) -> T:
    try:
        return cls()
    except TypeError as e:
        raise BadInput(f"{cls.__name__}: every config field needs a default ({e})")


def _owners(cls: type) -> dict[str, type]:
    """Field name -> the class whose annotation declares it (the last one in the MRO wins)."""
    owners: dict[str, type] = {}
    for base in reversed(cls.__mro__):
        owners.update(dict.fromkeys(_annotations(base), base))
    return owners


def _resolve(owner: type, name: str) -> Any:
    """The annotation of ``name`` in ``owner``, evaluated like ``typing.get_type_hints`` does
    (in ``owner``'s module, then its class namespace), but for this one field only."""
    module = sys.modules.get(owner.__module__)
    annotation = _annotations(owner)[name]
    stub = type(owner.__name__, (), {"__annotations__": {name: annotation}})
    hints = typing.get_type_hints(
        stub,
        globalns=dict(vars(owner)),
        localns=dict(getattr(module, "__dict__", {})),
        include_extras=True,
    )
    return hints[name]


def field_types(obj: Any, prefix: str = "") -> dict[str, Any]:
    """The type of every field of the dataclass ``obj`` (or class), each resolved on its own.

    A field whose annotation cannot be resolved (e.g. a name defined inside a function of a
    module with ``from __future__ import annotations``) is a :class:`BadInput` naming the field
    (``prefix`` + its name): it is never taken as "any type"."""
    cls = obj if isinstance(obj, type) else type(obj)
    owners = _owners(cls)
    return {f.name: _field_type(cls, f, owners, prefix) for f in dataclasses.fields(cls)}


def field_type(obj: Any, name: str, prefix: str = "") -> Any:
    """The resolved type of the one field ``name`` of ``obj`` (see :func:`field_types`)."""
    cls = obj if isinstance(obj, type) else type(obj)
    match = [f for f in dataclasses.fields(cls) if f.name == name]
    if not match:
        raise KeyError(name)
    return _field_type(cls, match[0], _owners(cls), prefix)


def _field_type(cls: type, f: dataclasses.Field, owners: dict[str, type], prefix: str) -> Any:
    owner = owners.get(f.name, cls)
    try:
        if f.name not in _annotations(owner):  # no annotation in the MRO to evaluate
            if isinstance(f.type, (str, typing.ForwardRef)):
                raise NameError(f"no annotation of {f.name!r} to evaluate it in")
            return f.type
        return _resolve(owner, f.name)
    except Exception as e:
        raise BadInput(
            f"config key '{prefix}{f.name}': its type {_annotation_text(f.type)} cannot be "
            f"resolved ({type(e).__name__}: {e}); define or import it at the top level of the "
            f"module of {owner.__qualname__}"
        ) from None


def _annotations(cls: type) -> dict[str, Any]:
    return inspect.get_annotations(cls)  # the class's own, not inherited


def check_types(cls: type, prefix: str = "") -> None:
    """Resolve the type of every field of ``cls`` and of its nested dataclasses (BadInput
    naming the first field that cannot be resolved)."""
    for name, tp in field_types(cls, prefix).items():
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            check_types(tp, f"{prefix}{name}.")


def _annotation_text(annotation: Any) -> str:
    return repr(annotation) if isinstance(annotation, str) else type_name(annotation)


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
    if isinstance(tp, (str, typing.ForwardRef)):  # field_types resolves them: never "any"
        raise Mismatch(f"a resolvable type, not the unresolved annotation {tp!r}")
    if tp is Any or tp is object:
        return _parse_json_or_text(value) if parse_text and isinstance(value, str) else value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is None and tp in (list, tuple, set, frozenset, dict):  # bare `list`, `dict`, ...
        origin = tp
    if origin is typing.Annotated:
        return coerce(value, args[0], parse_text)
    if origin in (typing.Union, types.UnionType):
        is_none = value is None or (
            parse_text and isinstance(value, str) and value.strip().lower() in _NONE
        )
        if is_none and type(None) in args:
            return None
        if not (parse_text and isinstance(value, str)):
            # a Python value of one of the types stays as it is (2.0 in `int | float`)
            for arg in args:
                if isinstance(arg, type) and type(value) is arg:
                    return value
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
        items, item_text = _as_list(value, parse_text)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(items) != len(args):
                raise Mismatch(f"{len(args)} items")
            return tuple(coerce(v, a, item_text) for v, a in zip(items, args, strict=True))
        item_tp = args[0] if args else Any
        out = [coerce(v, item_tp, item_text) for v in items]
        return out if origin in (list, Sequence) else origin(out)
    if origin is dict:
        if parse_text and isinstance(value, str):
            value = _json(value, "a JSON object")
            parse_text = False  # what JSON decoded is typed already: its strings stay strings
        if not isinstance(value, dict):
            raise Mismatch("a JSON object")
        kt, vt = args if args else (Any, Any)
        return {
            (k if kt is Any else coerce(k, kt, True)): coerce(v, vt, parse_text)
            for k, v in value.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if parse_text and isinstance(value, str):
            value = _json(value, "a JSON object")
            parse_text = False
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
        if isinstance(value, bool):
            raise Mismatch("an integer")
        if isinstance(value, numbers.Integral):  # numpy integers too
            return int(value)
        if isinstance(value, float) and value.is_integer():  # 1e5 in an experiment file
            return int(value)
        if text is not None:
            whole = _integer_text(text)
            if whole is not None:
                return whole
        raise Mismatch("an integer")
    if tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        if text is not None:
            try:
                return float(text)
            except ValueError:
                pass
        raise Mismatch("a number")
    if tp is str:
        if isinstance(value, str):
            if text is not None and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
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
            # a concrete path class (Path, ...): os.PathLike's own constructor takes nothing
            return tp(value)  # type: ignore[call-arg]
        raise Mismatch("a path")
    if isinstance(value, tp):
        return value
    raise Mismatch(tp.__name__)


def _integer_text(text: str) -> int | None:
    """``text`` as an integer: ``1000``, ``1_000``, or a whole number in scientific notation
    (``1e5``, ``2.5e3``); None for anything else (``3e-4``, ``1.5``, ``100.0``, ``nan``)."""
    try:
        return int(text)
    except ValueError:
        pass
    if "e" not in text.lower():
        return None
    try:
        number = decimal.Decimal(text)
    except (decimal.InvalidOperation, ValueError):
        return None
    if not number.is_finite() or number.adjusted() > 4000:
        return None
    if number != number.to_integral_value():
        return None
    return int(number)


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


def _as_list(value: Any, parse_text: bool) -> tuple[list[Any], bool]:
    """The items of ``value`` and whether they are text to parse (``a,b`` items are; the
    items of a JSON array are typed already)."""
    if parse_text and isinstance(value, str):
        text = value.strip()
        if not text.startswith("["):
            return ([] if not text else [p.strip() for p in text.split(",")]), True
        value = _json(text, "a JSON array")
        parse_text = False
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value), parse_text
    raise Mismatch("a list")


def _section_types(tp: Any) -> tuple[type, ...]:
    """The dataclass types a field of type ``tp`` may hold (``Model``, ``Model | None``)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _section_types(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(tp) for t in _section_types(arg))
    return (tp,) if isinstance(tp, type) and dataclasses.is_dataclass(tp) else ()


def _as_section(value: Any, parse_text: bool) -> tuple[dict[str, Any], bool] | None:
    """``value`` as the fields of a section (a dict, or JSON text of an object) and whether
    its values are text to parse; None when it is neither."""
    if isinstance(value, dict):
        return value, parse_text
    if parse_text and isinstance(value, str) and value.strip().startswith("{"):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return None
        return (decoded, False) if isinstance(decoded, dict) else None
    return None


def set_key(cfg: Any, key: str, value: Any, parse_text: bool) -> None:
    """Set the dotted ``key`` below ``cfg``, checking the name and the type."""
    parts = key.split(".")
    obj = cfg
    for depth, name in enumerate(parts):
        names = [f.name for f in dataclasses.fields(obj)]
        here = ".".join(parts[: depth + 1])
        if name not in names:
            parent = ".".join(parts[:depth])
            options = [f"{parent}.{n}" if parent else n for n in names]
            raise BadInput(f"unknown config key '{here}'{suggest(here, options)}")
        if depth < len(parts) - 1:
            child = getattr(obj, name)
            if not dataclasses.is_dataclass(child):
                raise BadInput(f"config key '{here}' is not a section, so '{key}' does not exist")
            obj = child
            continue
        tp = field_type(obj, name, "".join(p + "." for p in parts[:depth]))
        spec = next(f for f in dataclasses.fields(obj) if f.name == name)
        if not spec.init and getattr(type(obj), "__post_init__", None) is not None:
            raise BadInput(
                f"config key '{key}' is computed by {type(obj).__name__}.__post_init__ "
                "(field(init=False)); set the fields it is computed from"
            )
        current = getattr(obj, name)
        section = _as_section(value, parse_text)
        if section is not None and isinstance(current, _section_types(tp)):
            # a partial section changes the fields it names, like `key.field=...` items
            fields, text = section
            for sub_key, sub_value in fields.items():
                set_key(cfg, f"{key}.{sub_key}", sub_value, text)
            return
        try:
            coerced = coerce(value, tp, parse_text)
        except Mismatch as e:
            raise BadInput(
                f"config key '{key}': expected {e} ({type_name(tp)}), got {value!r}"
            ) from None
        object.__setattr__(obj, name, coerced)  # frozen dataclasses too


def finalize(cfg: T, prefix: str = "") -> T:
    """``cfg`` built again by its constructor from its final field values, sections first, when
    its class has a ``__post_init__``: derived fields and checks there see the overrides, not
    the defaults. An error raised there is a :class:`BadInput` naming the section."""
    for f in dataclasses.fields(cfg):  # type: ignore[arg-type]
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            built = finalize(value, f"{prefix}{f.name}.")
            if built is not value:
                object.__setattr__(cfg, f.name, built)
    cls = type(cfg)
    if getattr(cls, "__post_init__", None) is None:
        return cfg
    # cfg is a dataclass instance, as above (T is unbounded for the callers' sake)
    kwargs = {
        f.name: getattr(cfg, f.name)
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.init
    }
    try:
        return cls(**kwargs)
    except BadInput:
        raise
    except Exception as e:
        where = f"config section '{prefix[:-1]}'" if prefix else f"config {cls.__name__}"
        raise BadInput(f"{where}: {type(e).__name__}: {e}") from e


def check_all(cfg: Any, prefix: str = "") -> None:
    """Type-check every field (after ``configure()`` may have assigned anything)."""
    for name, tp in field_types(cfg, prefix).items():
        value = getattr(cfg, name)
        key = f"{prefix}{name}"
        if isinstance(value, _section_types(tp)):  # a section of its field's type: check it
            check_all(value, key + ".")
            continue
        try:
            object.__setattr__(cfg, name, coerce(value, tp, parse_text=False))
        except Mismatch as e:
            raise BadInput(
                f"config key '{key}': expected {e} ({type_name(tp)}), got {value!r}"
            ) from None
