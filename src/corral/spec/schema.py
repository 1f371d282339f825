"""Walk the spec models by key path: which keys exist where, and what type a path holds.

Used for "unknown key" suggestions and to check ``--set`` paths before applying them.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel


def _options(annotation: Any) -> list[Any]:
    """The alternatives of an annotation, without ``None`` and ``Annotated`` wrappers."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _options(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        out: list[Any] = []
        for arg in get_args(annotation):
            if arg is not type(None):
                out.extend(_options(arg))
        return out
    return [annotation]


def model_of(annotation: Any) -> type[BaseModel] | None:
    for opt in _options(annotation):
        if isinstance(opt, type) and issubclass(opt, BaseModel):
            return opt
    return None


def list_item(annotation: Any) -> Any | None:
    """The item type if the annotation is (or may be) a list."""
    for opt in _options(annotation):
        if get_origin(opt) is list:
            return get_args(opt)[0]
    return None


def dict_value(annotation: Any) -> Any | None:
    """The value type if the annotation is a mapping with free keys."""
    for opt in _options(annotation):
        if get_origin(opt) is dict:
            return get_args(opt)[1]
    return None


def is_text(annotation: Any) -> bool:
    """Whether the annotation holds free text only (no numbers, booleans or literals)."""
    opts = _options(annotation)
    return bool(opts) and all(opt is str for opt in opts)


def literal_values(annotation: Any) -> list[Any]:
    out: list[Any] = []
    for opt in _options(annotation):
        if get_origin(opt) is Literal:
            out.extend(get_args(opt))
    return out


def field_annotation(model: type[BaseModel], key: str) -> Any:
    """The full annotation of a field (with its ``Annotated`` metadata put back)."""
    info = model.model_fields[key]
    if info.metadata:
        return Annotated[(info.annotation, *info.metadata)]
    return info.annotation


def keys_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The keys a mapping at ``loc`` may have (empty if ``loc`` is not a model)."""
    annotation: Any = root
    for part in loc:
        model = model_of(annotation)
        if model is not None and isinstance(part, str) and part in model.model_fields:
            annotation = field_annotation(model, part)
        elif isinstance(part, int) and list_item(annotation) is not None:
            annotation = list_item(annotation)
        elif dict_value(annotation) is not None:
            annotation = dict_value(annotation)
        else:
            return []
    model = model_of(annotation)
    return list(model.model_fields) if model is not None else []
