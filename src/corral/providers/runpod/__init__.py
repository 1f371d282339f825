"""RunPod: GPU pods (on-demand and spot) through RunPod's REST and GraphQL APIs.

See :mod:`corral.providers.runpod.provider` and docs/providers.md.
"""

from corral.providers.runpod.provider import RunPodProvider
from corral.providers.runpod.settings import ENV_API_KEY, RunPodSettings

__all__ = ["ENV_API_KEY", "RunPodProvider", "RunPodSettings"]
