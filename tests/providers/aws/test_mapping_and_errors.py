"""Every EC2 state maps onto an InstanceState; every EC2 error onto a typed corral error."""

from __future__ import annotations

import pytest
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
from corral.providers.aws.errors import clean, map_error
from corral.providers.aws.mapping import map_state
from corral.providers.base import InstanceState as S


def item(state: str, reason: str = "", spot: bool = False) -> dict:
    out = {"InstanceId": "i-1", "State": {"Name": state}, "StateReason": {"Code": reason}}
    if spot:
        out["InstanceLifecycle"] = "spot"
    return out


@pytest.mark.parametrize(
    ("state", "reason", "spot_code", "expected"),
    [
        ("pending", "", None, S.PROVISIONING),
        ("running", "", None, S.RUNNING),
        ("running", "", "fulfilled", S.RUNNING),
        ("running", "", "marked-for-termination", S.PREEMPTED),
        ("running", "", "instance-terminated-no-capacity", S.PREEMPTED),
        ("shutting-down", "Client.UserInitiatedShutdown", None, S.TERMINATED),
        ("terminated", "Client.UserInitiatedShutdown", None, S.TERMINATED),
        ("terminated", "Client.InstanceInitiatedShutdown", None, S.TERMINATED),
        ("terminated", "Client.UserInitiatedShutdown", "instance-terminated-by-user", S.TERMINATED),
        ("shutting-down", "Server.SpotInstanceTermination", None, S.PREEMPTED),
        ("terminated", "Server.SpotInstanceTermination", None, S.PREEMPTED),
        ("terminated", "", "instance-terminated-by-price", S.PREEMPTED),
        ("terminated", "Server.InsufficientInstanceCapacity", None, S.FAILED),
        ("terminated", "Server.InternalError", None, S.FAILED),
        ("terminated", "Client.VolumeLimitExceeded", None, S.FAILED),
        ("stopping", "Client.UserInitiatedShutdown", None, S.STOPPED),
        ("stopped", "", None, S.STOPPED),
        ("stopped", "Server.SpotInstanceShutdown", None, S.PREEMPTED),
        ("stopped", "", "instance-stopped-no-capacity", S.PREEMPTED),
        ("rebooting-into-the-void", "", None, S.UNKNOWN),
    ],
)
def test_every_ec2_state_maps_to_an_instance_state(state, reason, spot_code, expected) -> None:
    got, detail = map_state(item(state, reason, spot=spot_code is not None), spot_code)
    assert got == expected
    if expected == S.PREEMPTED:
        assert "spot" in detail.lower()


def test_a_reclaimed_instance_says_why_and_a_self_powered_off_one_says_so() -> None:
    _, detail = map_state(item("terminated", "Server.SpotInstanceTermination", True))
    assert "EC2 reclaimed the spot instance" in detail
    _, detail = map_state(item("terminated", "Client.InstanceInitiatedShutdown"))
    assert "powered itself off" in detail


def client_error(code: str, status: int = 400, message: str = "it failed") -> bx.ClientError:
    return bx.ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "RunInstances",
    )


@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [
        ("InsufficientInstanceCapacity", 500, NoCapacity),
        ("SpotMaxPriceTooLow", 400, NoCapacity),
        ("UnfulfillableCapacity", 400, NoCapacity),
        ("Unsupported", 400, NoCapacity),
        ("VcpuLimitExceeded", 400, QuotaExceeded),
        ("MaxSpotInstanceCountExceeded", 400, QuotaExceeded),
        ("InstanceLimitExceeded", 400, QuotaExceeded),
        ("AuthFailure", 401, AuthFailed),
        ("UnauthorizedOperation", 403, AuthFailed),
        ("OptInRequired", 401, AuthFailed),
        ("RequestLimitExceeded", 503, RateLimited),
        ("InternalError", 500, ProviderUnavailable),
        ("SomethingNew", 503, ProviderUnavailable),
        ("InvalidParameterValue", 400, ProviderError),
    ],
)
def test_ec2_error_codes_map_to_typed_errors(code: str, status: int, cls: type) -> None:
    err = map_error(client_error(code, status), "run_instances", "us-east-1")
    assert type(err) is cls
    assert err.fields["aws_code"] == code
    assert str(err).startswith(f"aws run_instances in us-east-1: {code}: ")
    assert "\n" not in str(err)


def test_transport_failures_map_to_unavailable_and_say_whether_the_call_may_have_happened() -> None:
    timeout = map_error(bx.ReadTimeoutError(endpoint_url="https://ec2"), "run_instances", "r")
    assert isinstance(timeout, MaybeLaunched)  # the controller looks the key up, never drops it
    assert isinstance(timeout, ProviderUnavailable)
    read = map_error(bx.ReadTimeoutError(endpoint_url="https://ec2"), "describe_instances", "r")
    assert type(read) is ProviderUnavailable  # no launch to lose: retried like any other
    refused = map_error(bx.EndpointConnectionError(endpoint_url="https://ec2"), "x", "r")
    assert type(refused) is ProviderUnavailable
    assert isinstance(map_error(bx.NoCredentialsError(), "x", "r"), AuthFailed)


def test_error_messages_drop_access_key_ids_and_stay_one_short_line() -> None:
    msg = "User AKIAABCDEFGHIJKLMNOP is not\nauthorized " + "x" * 500
    err = map_error(client_error("UnauthorizedOperation", 403, msg), "run_instances", "r")
    assert "AKIAABCDEFGHIJKLMNOP" not in str(err) and "[redacted]" in str(err)
    assert len(clean(msg)) <= 300 and "\n" not in clean(msg)
