"""Webhook signatures: HMAC-SHA256 over ``f"{timestamp}.{body}"`` with the webhook's secret.

The timestamp is in the signed text, so a captured request cannot be replayed later with a
fresh timestamp; receivers reject timestamps outside a tolerance (default 5 minutes). Only the
standard library is used here: receivers and ``corral webhook verify`` import it cheaply.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from corral.errors import EXIT_RUN_NOT_SUCCEEDED, CorralError

HEADER_EVENT = "X-Corral-Event"
HEADER_DELIVERY = "X-Corral-Delivery"
HEADER_TIMESTAMP = "X-Corral-Timestamp"
HEADER_SIGNATURE = "X-Corral-Signature"
HEADER_ATTEMPT = "X-Corral-Attempt"
SIGNATURE_PREFIX = "sha256="
DEFAULT_TOLERANCE_S = 300.0


class SignatureInvalid(CorralError):
    """A webhook request whose signature or timestamp does not check out."""

    code = "signature_invalid"
    exit_code = EXIT_RUN_NOT_SUCCEEDED


def sign(secret: str, timestamp: str | int, body: bytes) -> str:
    """The ``X-Corral-Signature`` value: ``sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">``."""
    message = str(timestamp).encode("ascii") + b"." + body
    digest = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify(
    secret: str,
    timestamp: str | int,
    body: bytes,
    signature: str,
    *,
    tolerance: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Raise :class:`SignatureInvalid` unless ``signature`` is ``sign(secret, timestamp,
    body)`` and ``timestamp`` (unix seconds) is within ``tolerance`` seconds of ``now``
    (``tolerance`` 0: no time check). Compared in constant time."""
    text = str(timestamp).strip()
    if not text.isdigit():
        raise SignatureInvalid("the timestamp is not a number of unix seconds")
    if tolerance > 0:
        age = (time.time() if now is None else now) - int(text)
        if abs(age) > tolerance:
            when = "old" if age > 0 else "in the future"
            raise SignatureInvalid(
                f"the timestamp is {abs(age):.0f}s {when}, outside the {tolerance:g}s tolerance"
            )
    given = signature.strip()
    if not given.startswith(SIGNATURE_PREFIX):
        raise SignatureInvalid(f"the signature does not start with {SIGNATURE_PREFIX!r}")
    if not hmac.compare_digest(given.encode("utf-8"), sign(secret, text, body).encode("utf-8")):
        raise SignatureInvalid("the signature does not match the body, timestamp and secret")
