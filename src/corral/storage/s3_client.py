"""The boto3 client for S3-compatible stores: settings from the environment, and error mapping.

Settings (never from a job spec file):

==============================  ===============================================================
``CORRAL_S3_ENDPOINT_URL``      endpoint of an S3-compatible store (R2, MinIO); wins over
``AWS_ENDPOINT_URL_S3``,        the AWS variables, which botocore also knows, which win over
``AWS_ENDPOINT_URL``,           ``R2_ENDPOINT_URL`` (the name of IO.net's guide)
``R2_ENDPOINT_URL``
``AWS_REGION``,                 region; default ``auto`` for an R2 endpoint, else ``us-east-1``
``AWS_DEFAULT_REGION``
``AWS_ACCESS_KEY_ID``,          credentials; without them botocore's own chain is used
``AWS_SECRET_ACCESS_KEY``,      (``~/.aws``, instance profile, ...)
``AWS_SESSION_TOKEN``
``R2_ACCESS_KEY_ID``,           credentials by the names of IO.net's guide, used when the AWS
``R2_SECRET_ACCESS_KEY``        pair is not set (a pair is never mixed with the other)
==============================  ===============================================================

The client sends checksums only when an operation requires them
(``request_checksum_calculation="when_required"``): boto3's default since 1.36 streams every
upload ``aws-chunked`` with a trailing CRC32, which R2 has rejected. Uploads add an explicit
``x-amz-checksum-sha256`` header instead (see :mod:`corral.storage.s3_transfer`).

Credential values live only inside the boto3 session; :func:`redact` removes them from any
text that could reach a message (belt and braces: messages are built from error codes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from corral.errors import BadInput
from corral.storage.errors import (
    StorageAccessDenied,
    StorageError,
    StorageIntegrityError,
    StorageNotFound,
    StorageThrottled,
    StorageUnavailable,
)

ENV_ENDPOINT = "CORRAL_S3_ENDPOINT_URL"
#: the endpoint's variables, the first set one wins (IO.net's guide's name last)
ENDPOINT_VARS = (ENV_ENDPOINT, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "R2_ENDPOINT_URL")
REGION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")
AWS_CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
#: the key pair by the names of IO.net's guide (Cloudflare R2), used when the AWS pair is unset
R2_CREDENTIAL_VARS = ("R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY")
#: every variable that holds a storage credential (masked wherever a message could show it)
CREDENTIAL_VARS = (*AWS_CREDENTIAL_VARS, *R2_CREDENTIAL_VARS)

_ACCESS = {
    "AccessDenied",
    "AllAccessDisabled",
    "AccountProblem",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidToken",
    "SignatureDoesNotMatch",
    "Unauthorized",
    "403",
    "401",
}
_THROTTLE = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "TooManyRequestsException",
    "429",
}
_UNAVAILABLE = {"InternalError", "ServiceUnavailable", "503", "500", "502", "504"}
_DIGEST = {"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"}
_MISSING_OBJECT = {"NoSuchKey", "404", "NotFound"}


@dataclass(frozen=True)
class S3Settings:
    """Where the store is. Holds no credentials."""

    endpoint_url: str | None = None
    region: str = "us-east-1"
    max_attempts: int = 8  # botocore "standard" retries (throttling, 5xx, connection errors)
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_pool_connections: int = 32

    @property
    def endpoint_label(self) -> str:
        """The endpoint for messages (no user info, no query), or "AWS S3"."""
        return safe_endpoint(self.endpoint_url) if self.endpoint_url else "AWS S3"


def safe_endpoint(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def settings_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_attempts: int | None = None,
) -> S3Settings:
    """Settings from arguments first, then the environment (see the module docstring)."""
    env = os.environ if environ is None else environ
    endpoint = endpoint_url or next((env[v] for v in ENDPOINT_VARS if env.get(v)), None)
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadInput(
                f"object storage endpoint must be an http(s) URL, got {safe_endpoint(endpoint)!r}"
            )
    chosen = region or next((env[v] for v in REGION_VARS if env.get(v)), None)
    if chosen is None:
        is_r2 = endpoint is not None and ".r2.cloudflarestorage.com" in endpoint
        chosen = "auto" if is_r2 else "us-east-1"
    extra = {"max_attempts": max_attempts} if max_attempts is not None else {}
    return S3Settings(endpoint_url=endpoint, region=chosen, **extra)


_session: Any = None
_session_lock = threading.Lock()


def make_client(settings: S3Settings, environ: Mapping[str, str] | None = None) -> Any:
    """A boto3 S3 client for ``settings``, with credentials from ``environ`` (or botocore's
    default chain when the environment has none). Clients are thread-safe; they come from one
    boto3 session per process (made under a lock: sessions are not), which keeps the service
    model loaded once."""
    global _session
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise BadInput("s3:// storage needs boto3: pip install 'corral[aws]'") from None
    credentials = credentials_from_env(os.environ if environ is None else environ)
    config = Config(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"mode": "standard", "max_attempts": settings.max_attempts},
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        max_pool_connections=settings.max_pool_connections,
    )
    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        return _session.client(
            "s3",
            region_name=settings.region,
            endpoint_url=settings.endpoint_url,
            config=config,
            **credentials,
        )


def credentials_from_env(environ: Mapping[str, str]) -> dict[str, str | None]:
    """boto3's credential arguments: the AWS pair (``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``, with ``AWS_SESSION_TOKEN``) when both are set, else the R2 pair
    of IO.net's guide (``R2_ACCESS_KEY_ID`` and ``R2_SECRET_ACCESS_KEY``), else none
    (botocore's own chain)."""
    key, secret, token = (environ.get(v) or None for v in AWS_CREDENTIAL_VARS)
    if key and secret:
        return {
            "aws_access_key_id": key,
            "aws_secret_access_key": secret,
            "aws_session_token": token,
        }
    key, secret = (environ.get(v) or None for v in R2_CREDENTIAL_VARS)
    if key and secret:
        return {"aws_access_key_id": key, "aws_secret_access_key": secret}
    return {}


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return [env[v] for v in CREDENTIAL_VARS if len(env.get(v) or "") >= 4]


def redact(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every credential value of the environment replaced by ``***``."""
    for value in secrets if secrets is not None else secret_values():
        text = text.replace(value, "***")
    return text


def translate(exc: BaseException, action: str, path: str, settings: S3Settings) -> BaseException:
    """The exception to raise for a boto3/botocore failure of ``action`` on ``path``:
    ``FileNotFoundError`` for a missing object, else a :class:`StorageError` subclass."""
    from botocore.exceptions import (
        ClientError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError

    where = f"{action} {path}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code") or "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            bucket = path.removeprefix("s3://").split("/", 1)[0]
            return StorageNotFound(
                f"{where}: bucket {bucket!r} does not exist at {settings.endpoint_label}"
            )
        if code in _MISSING_OBJECT or (not code and status == 404):
            return FileNotFoundError(2, "no such object", path)
        label = f"{code or 'HTTP error'}, HTTP {status}" if status else code or "error"
        if code in _ACCESS or status in (401, 403):
            return StorageAccessDenied(
                f"{where}: access denied ({label}): check the storage credentials "
                "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) and the bucket's permissions"
            )
        if code in _THROTTLE or status == 429:
            return StorageThrottled(f"{where}: the object store is throttling requests ({label})")
        if code in _UNAVAILABLE or ((status or 0) >= 500 and code != "NotImplemented"):
            return StorageUnavailable(f"{where}: the object store failed ({label})")
        if code in _DIGEST:
            return StorageIntegrityError(f"{where}: the data was corrupted in transit ({label})")
        if code == "NotImplemented":
            return StorageError(f"{where}: not supported by this object store ({label})")
        return StorageError(f"{where} failed ({label})")
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return StorageAccessDenied(
            f"{where}: no storage credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(exc, (BotoConnectionError, HTTPClientError)):
        return StorageUnavailable(
            f"{where}: cannot reach the object store at {settings.endpoint_label} "
            f"({type(exc).__name__})"
        )
    detail = " ".join(redact(str(exc)).split())  # one line
    return StorageError(f"{where} failed ({type(exc).__name__}: {detail})")


def is_boto_error(exc: BaseException) -> bool:
    """True for exceptions raised by botocore (the ones :func:`translate` maps)."""
    return type(exc).__module__.startswith("botocore")
