"""Object storage for checkpoints and artifacts: ``s3://`` stores (AWS S3, Cloudflare R2, MinIO)
behind the SDK's :class:`~corral.sdk.storage.Storage` protocol. It imports nothing of the SDK
(the SDK opens it by URI); the agent's checkpoint mirror is :mod:`corral.agent.mirror`.

``corral.sdk.storage.open_storage("s3://bucket/prefix", endpoint_url=...)`` returns an
:class:`~corral.storage.s3.S3Storage`; boto3 is imported only when one is first used.
"""

from __future__ import annotations

from corral.storage.errors import (
    SourceMismatch,
    StorageAccessDenied,
    StorageError,
    StorageIntegrityError,
    StorageNotFound,
    StorageThrottled,
    StorageUnavailable,
)

__all__ = [
    "SourceMismatch",
    "StorageAccessDenied",
    "StorageError",
    "StorageIntegrityError",
    "StorageNotFound",
    "StorageThrottled",
    "StorageUnavailable",
]
