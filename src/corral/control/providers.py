"""Which providers this controller uses: ``CORRAL_PROVIDERS`` (comma separated; default
``local``). A provider that cannot start (missing credentials, say) is left out with a reason
rather than stopping the controller."""

from __future__ import annotations

import os

from corral.errors import CorralError
from corral.providers.base import Provider
from corral.providers.registry import DEFAULT_PROVIDERS

ENV_PROVIDERS = "CORRAL_PROVIDERS"


def enabled_names() -> list[str]:
    raw = os.environ.get(ENV_PROVIDERS, DEFAULT_PROVIDERS)
    return [n.strip().lower() for n in raw.split(",") if n.strip()]


def load_providers(names: list[str] | None = None) -> tuple[dict[str, Provider], dict[str, str]]:
    """(providers by name, reasons for those left out)."""
    from corral.providers.registry import get_provider

    out: dict[str, Provider] = {}
    skipped: dict[str, str] = {}
    for name in names or enabled_names():
        try:
            out[name] = get_provider(name)
        except CorralError as e:
            skipped[name] = e.message
    return out, skipped
