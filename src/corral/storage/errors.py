"""Errors of object storage (S3, Cloudflare R2, MinIO), as :mod:`corral.errors` exceptions.

Raised by :mod:`corral.storage.s3`. A missing *object* is not one of these: it is
``FileNotFoundError``, as the :class:`~corral.sdk.storage.Storage` protocol says. Messages are one
line, name the ``s3://`` path and the server's error code, and never hold a credential value.

``retryable`` tells a caller that tries again later (the agent's checkpoint sync) whether another
try can help: throttling, an unreachable endpoint and a corrupted transfer can pass; a missing
bucket or denied access do not.
"""

from __future__ import annotations

from corral.errors import EXIT_PROVIDER, CorralError


class StorageError(CorralError):
    """An object-storage call failed."""

    code = "storage_error"
    exit_code = EXIT_PROVIDER
    retryable = False


class StorageNotFound(StorageError):
    """The bucket does not exist (at this endpoint)."""

    code = "storage_not_found"


class StorageAccessDenied(StorageError):
    """No credentials, wrong credentials, or credentials without the permission needed."""

    code = "storage_access_denied"


class StorageThrottled(StorageError):
    """The store asked us to slow down, and botocore's own retries did not get through."""

    code = "storage_throttled"
    retryable = True


class StorageUnavailable(StorageError):
    """The endpoint could not be reached, timed out, or failed on its side (5xx)."""

    code = "storage_unavailable"
    retryable = True


class StorageIntegrityError(StorageError):
    """What the store holds is not what was sent (checksum, ETag or size mismatch)."""

    code = "storage_integrity"
    retryable = True


class SourceMismatch(StorageIntegrityError):
    """The local file to upload does not match the sha256 it was expected to have (it is
    corrupt or changed while it was read): nothing was published."""

    code = "storage_source_mismatch"
    retryable = False
