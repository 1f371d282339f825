"""Provider registry: name -> ``"module:Class"``, imported only when asked for.

Adding a provider is a folder under ``corral/providers/`` plus one line in ``_PROVIDERS``.
Lazy loading keeps ``corral`` importable without any cloud SDK installed: ``boto3`` is only
imported when someone asks for ``aws``.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from corral.errors import BadInput, CorralError, ProviderError
from corral.providers.base import Provider

_PROVIDERS: dict[str, str] = {
    "local": "corral.providers.local:LocalProvider",
    "fake": "corral.providers.fake:FakeProvider",
    "aws": "corral.providers.aws.provider:AwsProvider",
    "runpod": "corral.providers.runpod:RunPodProvider",
}


def provider_names() -> list[str]:
    """Every registered provider name, sorted."""
    return sorted(_PROVIDERS)


def _unknown(name: str) -> BadInput:
    known = provider_names()
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return BadInput(
        f"unknown provider {name!r}{hint} (known: {', '.join(known)})",
        fields={"provider": name, "known": known},
    )


def provider_class(name: str) -> type[Provider]:
    """The provider class registered under ``name``. Unknown name -> :class:`BadInput`."""
    key = name.strip().lower() if isinstance(name, str) else name
    target = _PROVIDERS.get(key)
    if target is None:
        raise _unknown(str(name))
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProviderError(
            f"provider {key!r} cannot be loaded: {exc} (is its extra installed? "
            f"pip install 'corral[{key}]')"
        )
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise CorralError(f"registry entry {target!r} is not a Provider class")
    return cls


def get_provider(name: str, **kw: Any) -> Provider:
    """A new instance of the provider registered under ``name``, built with ``**kw``."""
    return provider_class(name)(**kw)
