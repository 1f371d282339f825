"""Webhook signature checks through the service."""

from __future__ import annotations

import pytest

from corral.errors import BadInput
from corral.notify.signing import sign
from corral.service.webhooks import SignatureInvalid, rejected, verify_signature

BODY = b'{"event": "run.finished"}'


def test_a_good_signature_is_valid_with_its_age_and_size() -> None:
    sig = sign("s3cret-value", 1000, BODY)
    ok = verify_signature("s3cret-value", "1000", BODY, sig, now=1012.34)
    assert ok.to_json() == {"valid": True, "age_s": 12.3, "bytes": len(BODY)}


def test_a_tampered_body_or_stale_timestamp_is_rejected_with_a_reason() -> None:
    sig = sign("s3cret-value", 1000, BODY)
    with pytest.raises(SignatureInvalid, match="does not match") as bad:
        verify_signature("s3cret-value", "1000", BODY + b" ", sig, now=1000)
    assert rejected(bad.value).to_json() == {"valid": False, "reason": bad.value.message}
    with pytest.raises(SignatureInvalid, match="outside the 300s tolerance"):
        verify_signature("s3cret-value", "1000", BODY, sig, now=2000)


def test_an_empty_secret_is_bad_input() -> None:
    with pytest.raises(BadInput, match="secret is empty"):
        verify_signature("", "1000", BODY, "sha256=00")
