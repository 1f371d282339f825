"""A provider's credential under any of the names it is known by, in a documented order.

A provider's key may be set under corral's own name (``CORRAL_RUNPOD_API_KEY``,
``IONET_API_KEY``) or under the name the provider's own guide tells its users to export
(``RUNPOD_API_KEY``, IO.net's ``IOCLOUD_API_KEY``). Both are read; when both are set the first
name of the provider's list wins, the same way everywhere: each name is looked up in corral's
secret store, then in the environment (:func:`corral.secrets.resolve`), before the next name.
When two of them hold different values the choice is logged once, by name (never a value).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from corral.errors import AuthFailed

if TYPE_CHECKING:
    from corral.secrets.store import SecretStore

log = logging.getLogger("corral.providers")

_said: set[tuple[str, ...]] = set()
_said_lock = threading.Lock()


def first_credential(
    names: Sequence[str],
    *,
    resolve: Callable[[str], str | None] | None = None,
    store: SecretStore | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str] | None:
    """``(name, value)`` of the first of ``names`` that is set (store, then environment, name
    by name), or None when none is. The value is registered for redaction (``resolve``)."""
    if resolve is None:
        from corral.secrets import resolve as _resolve

        def resolve(name: str) -> str | None:
            return _resolve(name, store=store, environ=environ)

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


def require_credential(
    provider: str, names: Sequence[str], given: str | None = None, *, hint: str | None = None
) -> str:
    """The API key a provider is built with: ``given`` (passed by code), else the first of
    ``names`` that is set (:func:`first_credential`); none is :class:`AuthFailed`
    ``"<provider>: no API key: <hint>"`` (default :func:`names_hint`)."""
    if given:
        return given
    found = first_credential(names)
    if found is None:
        raise AuthFailed(f"{provider}: no API key: {hint or names_hint(names)}")
    return found[1]
