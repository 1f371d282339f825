"""Secret values by name: the secret store first, then the environment variable of that name.

Whatever is resolved is registered with the redactor, so it is ``***`` in every log line,
event and webhook payload of this process from then on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from corral.errors import BadInput
from corral.secrets.redact import register_values
from corral.secrets.store import SecretStore, check_name


def resolve(
    name: str, *, store: SecretStore | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The value of secret ``name``: from the store, else ``$name``; None if neither has it
    (an empty variable counts as unset). BadInput for an invalid name; SecretKeyError if the
    store has it but cannot decrypt it."""
    check_name(name)
    store = store if store is not None else SecretStore()
    value = store.get(name) if name in store.names() else None
    if value is None:
        value = (os.environ if environ is None else environ).get(name) or None
    if value is not None:
        register_values([value])
    return value


def resolve_many(
    names: Iterable[str],
    *,
    store: SecretStore | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``{name: value}`` for every name; BadInput naming all the missing ones at once."""
    wanted = list(dict.fromkeys(check_name(n) for n in names))
    if not wanted:
        return {}
    store = store if store is not None else SecretStore()
    found: dict[str, str] = {}
    missing = []
    for name in wanted:
        value = resolve(name, store=store, environ=environ)
        if value is None:
            missing.append(name)
        else:
            found[name] = value
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise BadInput(
            f"secret{plural} not set: {', '.join(missing)} (set with `corral secret set NAME`, "
            "or export it where the controller runs)",
            code="secret_missing",
            fields={"missing": missing},
        )
    return found
