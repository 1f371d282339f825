"""The local provider: runs corral's agent on this machine and shares its GPUs between runs."""

from corral.providers.local.provider import LocalProvider
from corral.providers.local.settings import ENV_LOCAL_PRICE

__all__ = ["ENV_LOCAL_PRICE", "LocalProvider"]
