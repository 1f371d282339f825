"""Signatures: sign/verify, and ``corral webhook verify`` good and bad."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.webhook import app
from corral.notify import SignatureInvalid, sign, verify

runner = CliRunner()
BODY = b'{"id":"d-1","type":"run.finished","data":{"state":"SUCCEEDED"}}'


def test_a_signature_is_hmac_sha256_over_timestamp_dot_body():
    import hashlib
    import hmac

    expected = hmac.new(b"k3y", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert sign("k3y", 1700000000, BODY) == "sha256=" + expected


def test_verify_accepts_the_signature_and_rejects_changes():
    now = 1_700_000_000
    sig = sign("k3y", now, BODY)
    verify("k3y", str(now), BODY, sig, now=now + 10)
    bad = [
        ("other", str(now), BODY, sig, "does not match"),
        ("k3y", str(now), BODY + b" ", sig, "does not match"),
        ("k3y", str(now + 1), BODY, sig, "does not match"),
        ("k3y", str(now), BODY, sig.replace("sha256=", ""), "does not start with"),
        ("k3y", "yesterday", BODY, sig, "not a number"),
    ]
    for secret, ts, body, s, why in bad:
        with pytest.raises(SignatureInvalid, match=why):
            verify(secret, ts, body, s, now=now)


def test_verify_rejects_old_and_future_timestamps_unless_tolerance_is_zero():
    now = 1_700_000_000
    sig = sign("k3y", now - 301, BODY)
    with pytest.raises(SignatureInvalid, match="301s old"):
        verify("k3y", now - 301, BODY, sig, now=now)
    verify("k3y", now - 301, BODY, sig, now=now, tolerance=0)
    future = sign("k3y", now + 400, BODY)
    with pytest.raises(SignatureInvalid, match="in the future"):
        verify("k3y", now + 400, BODY, future, now=now)


def _cli(*args: str, body: bytes = BODY, env: dict[str, str] | None = None):
    result = runner.invoke(app, ["verify", *args], input=body, env=env)
    return result.exit_code, result.stdout, result.stderr


def test_cli_verify_exits_0_for_a_good_signature_read_from_stdin():
    ts = str(int(time.time()))
    code, out, _ = _cli(
        "--secret-env",
        "HOOK_SECRET",
        "--timestamp",
        ts,
        "--signature",
        sign("k3y", ts, BODY),
        env={"HOOK_SECRET": "k3y"},
    )
    assert code == 0 and "signature valid" in out


def test_cli_verify_exits_1_for_a_bad_or_stale_signature(tmp_path: Path):
    ts = str(int(time.time()))
    env = {"HOOK_SECRET": "k3y"}
    code, _, err = _cli(
        "--secret-env",
        "HOOK_SECRET",
        "--timestamp",
        ts,
        "--signature",
        sign("nope", ts, BODY),
        env=env,
    )
    assert code == 1 and "does not match" in err and "k3y" not in err
    old = str(int(time.time()) - 3600)
    body_file = tmp_path / "body.json"
    body_file.write_bytes(BODY)
    args = [
        "--secret-env",
        "HOOK_SECRET",
        "--timestamp",
        old,
        "--signature",
        sign("k3y", old, BODY),
        "--body",
        str(body_file),
    ]
    code, out, _ = _cli(*args, "--json", body=b"", env=env)
    assert code == 1 and json.loads(out)["valid"] is False
    code, out, _ = _cli(*args, "--tolerance", "0", "--json", body=b"", env=env)
    assert code == 0 and json.loads(out)["valid"] is True


def test_cli_verify_without_the_secret_variable_is_a_usage_error():
    code, _, err = _cli(
        "--secret-env",
        "NOT_SET_ANYWHERE",
        "--timestamp",
        "1",
        "--signature",
        "sha256=00",
        env={"NOT_SET_ANYWHERE": ""},
    )
    assert code == 2 and "NOT_SET_ANYWHERE" in err
