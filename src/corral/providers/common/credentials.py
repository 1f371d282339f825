"""A credential known by several names: corral's own, and the one a provider's own guide uses
(``IONET_API_KEY`` and IO.net's ``IOCLOUD_API_KEY``, say).

The names are tried in the order given, corral's own first; each name is looked up in corral's
secret store, then in the environment (:func:`corral.secrets.resolve`). When two of them hold
different values the first wins and the choice is logged once, by name (never a value).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger("corral.providers")

_said: set[tuple[str, ...]] = set()
_said_lock = threading.Lock()


def _resolve(name: str) -> str | None:
    from corral.secrets import resolve

    return resolve(name)


def first_credential(
    names: Sequence[str], *, resolve: Callable[[str], str | None] = _resolve
) -> tuple[str, str] | None:
    """``(name, value)`` of the first of ``names`` that is set, or None if none is."""
    found = [(n, v) for n in names if (v := resolve(n))]
    if not found:
        return None
    chosen = found[0]
    others = [n for n, v in found[1:] if v != chosen[1]]
    if others:
        key = (chosen[0], *others)
        with _said_lock:
            new = key not in _said
            _said.add(key)
        if new:
            log.info("%s and %s are both set: %s is used", chosen[0], ", ".join(others), chosen[0])
    return chosen


def names_hint(names: Sequence[str]) -> str:
    """How to set a credential of ``names``, for a one-line error."""
    first = names[0]
    rest = f" (or {' / '.join(names[1:])})" if len(names) > 1 else ""
    return f"`corral secret set {first}` or export {first}{rest}"
