"""Object-store failures become one-line corral errors that never show a credential."""

from __future__ import annotations

import socket

import pytest
from botocore.exceptions import NoCredentialsError, ParamValidationError
from botocore.stub import Stubber

from corral.errors import EXIT_PROVIDER
from corral.sdk.storage import open_storage
from corral.storage.errors import (
    StorageAccessDenied,
    StorageError,
    StorageNotFound,
    StorageThrottled,
    StorageUnavailable,
)
from corral.storage.s3 import S3Storage

from .conftest import SECRET_KEY, Bucket, assert_no_secret


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    assert_no_secret(text)
    return text


def test_a_missing_bucket_is_storage_not_found(bucket: Bucket) -> None:
    st = open_storage("s3://corral-no-such-bucket")
    with pytest.raises(StorageNotFound) as listing:
        st.listdir("s3://corral-no-such-bucket/run")
    assert "bucket 'corral-no-such-bucket' does not exist at http://127.0.0.1:" in one_line(
        listing.value
    )
    with pytest.raises(StorageNotFound):
        st.write_bytes("s3://corral-no-such-bucket/run/x", b"data")
    assert listing.value.exit_code == EXIT_PROVIDER


@pytest.mark.parametrize(
    ("code", "status", "error", "words"),
    [
        ("AccessDenied", 403, StorageAccessDenied, "access denied"),
        ("InvalidAccessKeyId", 403, StorageAccessDenied, "AWS_SECRET_ACCESS_KEY"),
        ("SlowDown", 503, StorageThrottled, "throttling"),
        ("InternalError", 500, StorageUnavailable, "failed"),
        ("NotImplemented", 501, StorageError, "not supported"),
    ],
)
def test_server_errors_map_to_storage_errors(s3_env, code, status, error, words) -> None:
    st = S3Storage()
    with Stubber(st.client) as stub:
        stub.add_client_error(
            "list_objects_v2",
            service_error_code=code,
            service_message=f"server text with {SECRET_KEY}",
            http_status_code=status,
        )
        with pytest.raises(error) as caught:
            st.listdir("s3://some-bucket/run")
    assert type(caught.value) is error
    assert words in one_line(caught.value) and code in str(caught.value)
    assert caught.value.retryable == (error in (StorageThrottled, StorageUnavailable))


def test_an_unreachable_endpoint_is_storage_unavailable(s3_env) -> None:
    with socket.socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    st = S3Storage(endpoint_url=f"http://127.0.0.1:{port}", max_attempts=1)
    with pytest.raises(StorageUnavailable, match=f"cannot reach the object store at .*:{port}"):
        st.read_bytes("s3://some-bucket/x")


def test_missing_credentials_and_odd_failures_say_what_to_do_without_secrets(s3_env) -> None:
    st = S3Storage()
    denied = st._error(NoCredentialsError(), "read", "s3://b/x")
    assert isinstance(denied, StorageAccessDenied)
    assert "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in one_line(denied)
    odd = st._error(ParamValidationError(report=f"bad value {SECRET_KEY}"), "write", "s3://b/x")
    assert isinstance(odd, StorageError) and "***" in one_line(odd)
