"""A provider's settings read from ``<PREFIX><FIELD>`` environment variables, and checked.

Settings come from the environment (what an operator exports) and from overrides (what code
passes). A bad value must say where it came from in one line, so that the operator knows what
to fix: the variable when it was exported, the field when code gave it. Pydantic's own report
(several lines, a URL per error) is not shown: only its first error.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from corral.errors import BadInput

M = TypeVar("M", bound=BaseModel)


def validated_settings(
    model: type[M], values: Mapping[str, object], *, what: str, origin: Mapping[str, str]
) -> M:
    """``model`` from ``values``; a bad value is :class:`BadInput` ``"<what>: <where>: <why>"``,
    ``<where>`` being ``origin[field]`` (an environment variable, say) or else the field's name
    (``settings`` for an error of the whole model)."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        where = origin.get(field, field or "settings")
        raise BadInput(f"{what}: {where}: {first['msg']}") from None


def read_settings(
    model: type[M],
    environ: Mapping[str, str] | None,
    prefix: str,
    overrides: Mapping[str, object],
    *,
    what: str,
    nullable: Collection[str] = (),
    item: Callable[[str], str] = str.strip,
) -> M:
    """``model`` from ``<prefix><FIELD>`` variables (upper case; empty ones ignored), then
    ``overrides``. A list field's variable is comma separated, each item passed through
    ``item``; ``none`` or ``off`` sets a field of ``nullable`` to None. A bad value names its
    variable, or the override's field (see :func:`validated_settings`). ``environ``: None
    for the process's environment."""
    env = os.environ if environ is None else environ
    data: dict[str, object] = {}
    for name, field in model.model_fields.items():
        raw = env.get(prefix + name.upper())
        if raw is None or raw == "":
            continue
        if field.annotation is not None and "list" in str(field.annotation):
            data[name] = [item(p.strip()) for p in raw.split(",") if p.strip()]
        elif raw.lower() in ("none", "off") and name in nullable:
            data[name] = None
        else:
            data[name] = raw
    origin = {name: prefix + name.upper() for name in data if name not in overrides}
    data.update(overrides)
    return validated_settings(model, data, what=what, origin=origin)
