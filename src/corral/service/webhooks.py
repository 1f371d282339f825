"""Webhooks: check a request's signature the way a receiver should (see docs/webhooks.md)."""

from __future__ import annotations

import time

from corral.errors import BadInput
from corral.notify.signing import DEFAULT_TOLERANCE_S, SignatureInvalid, verify
from corral.secrets import resolve
from corral.service.views import SignatureRejected, SignatureValid

__all__ = ["SignatureInvalid", "rejected", "verify_signature", "webhook_secret"]


def webhook_secret(name: str) -> str:
    """The value of secret ``name`` found the way the controller finds a webhook's secret:
    corral's secret store, then the environment variable ``name``. BadInput naming it when
    neither has it (or the name is not a secret name)."""
    value = resolve(name)
    if value is None:
        raise BadInput(
            f"secret {name} (the webhook secret) is not set: neither in corral's secret store "
            "(`corral secret set NAME`) nor in the environment",
            fields={"secret": name},
        )
    return value


def verify_signature(
    secret: str,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> SignatureValid:
    """Check that ``signature`` is the HMAC-SHA256 of ``"<timestamp>.<body>"`` with
    ``secret`` and that ``timestamp`` is within ``tolerance`` seconds of ``now`` (0 or less:
    no time check). Raises :class:`SignatureInvalid` (one line saying why) when it is not."""
    if not secret:
        raise BadInput("the webhook secret is empty")
    now = time.time() if now is None else now
    verify(secret, timestamp, body, signature, tolerance=tolerance, now=now)
    age = now - int(timestamp.strip())
    return SignatureValid(age_s=round(age, 1), bytes=len(body))


def rejected(error: SignatureInvalid) -> SignatureRejected:
    """The JSON-ready form of a failed check."""
    return SignatureRejected(reason=error.message)
