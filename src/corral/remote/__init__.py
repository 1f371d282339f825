"""The CLI against a remote ``corral server`` (``CORRAL_SERVER`` and ``CORRAL_TOKEN``): a thin
HTTP client of the server's API (:mod:`corral.remote.client`) that returns the service's own
views, so the CLI shows a remote run exactly as a local one. It never touches the local store
or controller (import-linter: it imports neither); the server does that, with the same
service calls. This module is light (no httpx): the CLI asks :func:`configured` first."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.remote.client import RemoteClient

ENV_SERVER = "CORRAL_SERVER"
ENV_TOKEN = "CORRAL_TOKEN"


def configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CORRAL_SERVER`` names a server (the CLI then talks to it)."""
    return bool((os.environ if environ is None else environ).get(ENV_SERVER, "").strip())


def connect() -> RemoteClient | None:
    """The configured server's client (BadInput naming a missing or malformed variable), or
    None when no server is configured: the CLI then works on the local store."""
    if not configured():
        return None
    from corral.remote.client import from_env  # httpx: only in remote mode

    return from_env()
