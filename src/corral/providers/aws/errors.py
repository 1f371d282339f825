"""EC2 errors -> corral's typed provider errors.

============================================================  ==========================
EC2 error code                                                corral error
============================================================  ==========================
InsufficientInstanceCapacity, InsufficientCapacity,           :class:`NoCapacity`
UnfulfillableCapacity, SpotMaxPriceTooLow, Unsupported
VcpuLimitExceeded, MaxSpotInstanceCountExceeded,              :class:`QuotaExceeded`
InstanceLimitExceeded, VolumeLimitExceeded
AuthFailure, UnauthorizedOperation, OptInRequired, Blocked,   :class:`AuthFailed`
InvalidClientTokenId, SignatureDoesNotMatch, ExpiredToken,
no credentials at all
RequestLimitExceeded, Throttling                              :class:`RateLimited`
5xx, InternalError, Unavailable, timeouts, connection errors  :class:`ProviderUnavailable`
anything else                                                 :class:`ProviderError`
============================================================  ==========================

A message is one line: the operation, the region, the EC2 code and EC2's own message, with
anything shaped like an AWS access key id removed. A timeout or a dropped connection after the
request was sent may have taken effect: for ``run_instances`` it is
:class:`~corral.errors.MaybeLaunched` (``launch`` looks for the instance before it tries
again, the controller after it).
"""

from __future__ import annotations

import re

from botocore import exceptions as bx

from corral.errors import (
    AuthFailed,
    MaybeLaunched,
    NoCapacity,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    RateLimited,
)

NO_CAPACITY = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "SpotMaxPriceTooLow",
        "Unsupported",
        "InsufficientHostCapacity",
    }
)
QUOTA = frozenset(
    {
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "InstanceLimitExceeded",
        "VolumeLimitExceeded",
    }
)
AUTH = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "OptInRequired",
        "Blocked",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "AccessDenied",
        "AccessDeniedException",
    }
)
THROTTLE = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
UNAVAILABLE = frozenset({"InternalError", "Unavailable", "ServiceUnavailable", "InternalFailure"})
#: codes meaning "this instance (or id) does not exist"
NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})

_KEY_ID_RE = re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,}\b")


def clean(text: str, limit: int = 300) -> str:
    """One line, no access key id, at most ``limit`` characters."""
    line = " ".join(str(text).split())
    line = _KEY_ID_RE.sub("[redacted]", line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def map_error(exc: BaseException, op: str, region: str) -> ProviderError:
    """The corral error for an exception raised by a boto3 call ``op`` in ``region``."""
    where = f"aws {op} in {region}"
    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        msg = f"{where}: {code}: {clean(err.get('Message', ''))}"
        fields = {"aws_code": code, "region": region, "operation": op}
        if code in NO_CAPACITY:
            return NoCapacity(msg, fields=fields)
        if code in QUOTA:
            return QuotaExceeded(msg, fields=fields)
        if code in AUTH:
            return AuthFailed(msg, fields=fields)
        if code in THROTTLE:
            return RateLimited(msg, fields=fields)
        if code in UNAVAILABLE or status >= 500:
            return ProviderUnavailable(msg, fields=fields)
        return ProviderError(msg, fields=fields)
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return AuthFailed(
            f"{where}: no usable AWS credentials (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or run on a machine with an instance role)"
        )
    if isinstance(exc, bx.CredentialRetrievalError | bx.UnknownCredentialError):
        return AuthFailed(f"{where}: AWS credentials could not be loaded ({type(exc).__name__})")
    if isinstance(exc, bx.ReadTimeoutError | bx.ConnectionClosedError):
        cls = MaybeLaunched if op == "run_instances" else ProviderUnavailable
        return cls(
            f"{where}: no answer from EC2 ({type(exc).__name__}); the call may have happened",
            fields={"region": region, "operation": op},
        )
    if isinstance(exc, bx.ConnectTimeoutError | bx.EndpointConnectionError | bx.ConnectionError):
        return ProviderUnavailable(
            f"{where}: cannot reach EC2 ({type(exc).__name__})",
            fields={"region": region, "operation": op},
        )
    return ProviderError(f"{where}: {type(exc).__name__}: {clean(str(exc))}")
