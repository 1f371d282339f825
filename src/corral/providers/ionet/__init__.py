"""IO.net: CaaS deployments on decentralised GPUs (``shared/providers/ionet.md``)."""

from corral.providers.ionet.provider import IonetProvider
from corral.providers.ionet.settings import IonetSettings

__all__ = ["IonetProvider", "IonetSettings"]
