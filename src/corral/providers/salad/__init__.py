"""SaladCloud: container groups on consumer GPUs (``shared/providers/salad.md``)."""

from corral.providers.salad.provider import SaladProvider
from corral.providers.salad.settings import SaladSettings

__all__ = ["SaladProvider", "SaladSettings"]
