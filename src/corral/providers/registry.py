"""Provider registry: name -> ``"module:Class"``, imported only when asked for.

Adding a provider is a folder under ``corral/providers/`` plus one line in ``_PROVIDERS``.
Lazy loading keeps ``corral`` importable without any cloud SDK installed: a cloud's SDK is only
imported when someone asks for that provider.

Providers that live outside corral (a third-party package, a test double) are registered with
``CORRAL_PROVIDER_PLUGINS="name=package.module:Class,..."``, read on every lookup (so a
controller started in the background sees the plugins of the environment it inherited). A
plugin may take a built-in name and replace that provider (a test double of a cloud, say).
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from collections.abc import Mapping
from typing import Any

from corral.errors import BadInput, CorralError, ProviderError
from corral.providers.base import Provider, RunsOnThisMachine

_PROVIDERS: dict[str, str] = {
    "local": "corral.providers.local:LocalProvider",
    "fake": "corral.providers.fake:FakeProvider",
    "aws": "corral.providers.aws.provider:AwsProvider",
    "runpod": "corral.providers.runpod:RunPodProvider",
    "salad": "corral.providers.salad:SaladProvider",
    "ionet": "corral.providers.ionet:IonetProvider",
    "pool": "corral.providers.pool:PoolProvider",
}


#: The providers a controller uses when ``CORRAL_PROVIDERS`` does not say (this machine).
DEFAULT_PROVIDERS = "local"

#: ``name=module:Class`` pairs, comma-separated: providers registered from outside corral
ENV_PROVIDER_PLUGINS = "CORRAL_PROVIDER_PLUGINS"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def plugins(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The providers ``CORRAL_PROVIDER_PLUGINS`` registers (name -> ``"module:Class"``).
    A malformed entry is :class:`BadInput` naming it."""
    raw = (os.environ if environ is None else environ).get(ENV_PROVIDER_PLUGINS, "")
    out: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, sep, target = (x.strip() for x in item.partition("="))
        if not (sep and _NAME_RE.match(name.lower()) and _TARGET_RE.match(target)):
            raise BadInput(
                f"{ENV_PROVIDER_PLUGINS}: {item!r} is not 'name=package.module:Class'",
                fields={"entry": item},
            )
        out[name.lower()] = target
    return out


def _registered() -> dict[str, str]:
    """Built-in providers, then plugins (a plugin may replace a built-in entry)."""
    return {**_PROVIDERS, **plugins()}


def provider_names() -> list[str]:
    """Every registered provider name (built-in and plugins), sorted."""
    return sorted(_registered())


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
    target = _registered().get(key)
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


def this_machine() -> Provider | None:
    """A new instance of the first registered provider whose machine is this one
    (:class:`~corral.providers.base.RunsOnThisMachine`), in registration order; None if no
    loadable provider is. Providers whose module cannot be imported are passed over."""
    for name in _registered():
        try:
            cls = provider_class(name)
        except ProviderError:
            continue
        if issubclass(cls, RunsOnThisMachine):
            return cls()
    return None


def runs_on_this_machine(name: str) -> bool:
    """Whether the provider registered under ``name`` runs jobs on this machine."""
    return issubclass(provider_class(name), RunsOnThisMachine)
