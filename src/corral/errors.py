"""One exception root for corral, with stable machine codes and CLI exit codes.

Every error a user can see is a :class:`CorralError`. ``code`` is a stable, machine-readable
string (shown in ``--json`` output and API responses); ``exit_code`` is what the CLI exits with.
Messages are one clear line and never contain a secret value.

Documented CLI exit codes:

====  ==========================================================
0     success (for ``launch --wait``: the run SUCCEEDED)
1     the run ended but did not succeed (FAILED, CANCELLED, STOPPED)
2     bad input: spec file, ``--set`` override, CLI argument
3     not found: run, stage, file
4     conflict: the operation does not apply in the run's state
5     provider error: capacity, quota, auth, unavailable
6     store or controller error
7     agent error
70    internal error (a bug: please report it; ``--debug`` shows the traceback)
130   interrupted (Ctrl-C)
====  ==========================================================
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_RUN_NOT_SUCCEEDED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_PROVIDER = 5
EXIT_STORE = 6
EXIT_AGENT = 7
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


class CorralError(Exception):
    """Root of every error corral raises on purpose."""

    code: str = "error"
    exit_code: int = EXIT_INTERNAL

    def __init__(
        self, message: str, *, code: str | None = None, fields: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.fields = dict(fields or {})

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            **({"fields": self.fields} if self.fields else {}),
        }

    def __str__(self) -> str:  # one clear line
        return self.message


class BadInput(CorralError):
    """The user gave something invalid: a spec file, an override, an argument."""

    code = "bad_input"
    exit_code = EXIT_BAD_INPUT


class SpecError(BadInput):
    """The job spec is invalid. ``errors`` lists each problem (file, line, field, message)."""

    code = "spec_invalid"

    def __init__(self, message: str, *, errors: list[dict[str, Any]] | None = None):
        super().__init__(message, fields={"errors": errors or []})
        self.errors = errors or []


class NotFound(CorralError):
    code = "not_found"
    exit_code = EXIT_NOT_FOUND


class Conflict(CorralError):
    code = "conflict"
    exit_code = EXIT_CONFLICT


class SpendingCapReached(Conflict):
    """A launch that would pass a spending cap across runs (``corral budget``)."""

    code = "spending_cap"


class StoreError(CorralError):
    code = "store_error"
    exit_code = EXIT_STORE


class ControllerError(CorralError):
    code = "controller_error"
    exit_code = EXIT_STORE


class AgentError(CorralError):
    """The agent on the node could not be reached or answered with an error."""

    code = "agent_error"
    exit_code = EXIT_AGENT


class AgentUnreachable(AgentError):
    code = "agent_unreachable"


class WireVersionMismatch(AgentError):
    """The agent and the controller speak different versions of the wire contract
    (``corral.wire``): the message names both."""

    code = "wire_version_mismatch"


# --- provider errors: raised by providers, handled by the controller -------------------------


class ProviderError(CorralError):
    """A provider call failed. Subclasses tell the controller what to do next."""

    code = "provider_error"
    exit_code = EXIT_PROVIDER
    retryable: bool = False


class NoCapacity(ProviderError):
    """No instance of this offer can be had now. Raised by ``launch``; the caller tries the
    next offer or waits (the run stays PENDING)."""

    code = "no_capacity"
    retryable = True


class InfeasibleRequest(ProviderError):
    """The request can never be satisfied by this provider (e.g. more GPUs than exist)."""

    code = "infeasible"


class QuotaExceeded(ProviderError):
    code = "quota_exceeded"


class NoBalance(QuotaExceeded):
    """The provider account cannot pay for a machine (HTTP 402: no balance, no credit). Raised
    by ``launch``; no other offer of that provider can succeed either, so the caller skips
    the provider's remaining offers for this launch and says why in one line."""

    code = "no_balance"


class AuthFailed(ProviderError):
    code = "auth_failed"


class RateLimited(ProviderError):
    code = "rate_limited"
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ProviderUnavailable(ProviderError):
    code = "provider_unavailable"
    retryable = True


class MaybeLaunched(ProviderUnavailable):
    """A launch whose outcome is unknown: the create request was sent and no clear answer came
    back (a timeout, a dropped connection, a 5xx), and no machine of the launch key could be
    found afterwards, yet one may exist and bill: a listing can lag behind a create. Raised by
    ``launch``; the controller keeps the key as an intent and launches the same key again
    later, and since ``launch`` looks the key up first, the machine is adopted if it appeared,
    never created twice nor forgotten (a leak)."""

    code = "maybe_launched"


class NotYetTerminated(ProviderError):
    """``terminate`` was accepted but the instance is not gone yet; call again later."""

    code = "not_yet_terminated"
    retryable = True


class UnsupportedCapability(ProviderError):
    code = "unsupported"

    def __init__(self, provider: str, capability: str, reason: str):
        super().__init__(f"{provider} does not support {capability}: {reason}")
        self.provider = provider
        self.capability = capability
        self.reason = reason
