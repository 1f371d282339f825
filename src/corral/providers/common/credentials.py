"""A provider's credential under any of the names it is known by, in a documented order.

A provider's key may be set under corral's own name (``CORRAL_<PROVIDER>_API_KEY``, like every
other setting of the provider) or under the name the provider's own guide tells its users to
export (``RUNPOD_API_KEY``, ``SALAD_API_KEY``...). Both are read; when both are set the first
name of the provider's list wins, the same way everywhere: each name is looked up in corral's
secret store, then in the environment (:func:`corral.secrets.resolve`), before the next name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from corral.secrets import resolve
from corral.secrets.store import SecretStore


def first_secret(
    names: Sequence[str],
    *,
    store: SecretStore | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str] | None:
    """``(name, value)`` of the first of ``names`` that is set (store, then environment, name
    by name), or None when none is. The value is registered for redaction."""
    for name in names:
        value = resolve(name, store=store, environ=environ)
        if value:
            return name, value
    return None
