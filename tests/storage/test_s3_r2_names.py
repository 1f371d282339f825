"""The object-storage settings by the names of IO.net's guide (``R2_ACCESS_KEY_ID``,
``R2_SECRET_ACCESS_KEY``, ``R2_ENDPOINT_URL``) work as a storage configuration, after
corral's own names, and their secret is never shown."""

from __future__ import annotations

import uuid

import pytest

from corral.sdk.storage import open_storage
from corral.storage.errors import StorageNotFound
from corral.storage.s3_client import credentials_from_env, secret_values, settings_from_env

from .conftest import ACCESS_KEY, SECRET_KEY

R2_KEY = "r2-key-id-0a1b2c3d4e5f"
R2_SECRET = "r2-secret-never-printed-9z8y"


@pytest.fixture
def r2_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Only the guide's names: no AWS credentials, no corral endpoint."""
    for var in (
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "CORRAL_S3_ENDPOINT_URL",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/corral-test")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/corral-test")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("R2_ACCESS_KEY_ID", R2_KEY)
    monkeypatch.setenv("R2_SECRET_ACCESS_KEY", R2_SECRET)
    monkeypatch.setenv("R2_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("R2_BUCKET_NAME", "unused-by-corral")
    return moto_endpoint


def test_the_guides_r2_names_alone_are_a_working_store(r2_env: str) -> None:
    assert settings_from_env().endpoint_url == r2_env
    store = open_storage("s3://x")  # endpoint and credentials from the R2 names
    bucket = f"corral-{uuid.uuid4().hex[:12]}"
    store.client.create_bucket(Bucket=bucket)
    store.write_bytes(f"s3://{bucket}/run/ckpt", b"weights")
    assert store.read_bytes(f"s3://{bucket}/run/ckpt") == b"weights"
    with pytest.raises(StorageNotFound) as info:
        store.listdir("s3://corral-no-such-bucket/run")
    assert R2_SECRET not in str(info.value) and R2_KEY not in str(info.value)
    assert R2_SECRET in secret_values()  # masked wherever the environment's secrets are


def test_corral_and_aws_names_win_over_the_guides(r2_env: str, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_S3_ENDPOINT_URL", "https://corral.example")
    assert settings_from_env().endpoint_url == "https://corral.example"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://aws.example")
    monkeypatch.delenv("CORRAL_S3_ENDPOINT_URL")
    assert settings_from_env().endpoint_url == "https://aws.example"
    env = {"R2_ACCESS_KEY_ID": R2_KEY, "R2_SECRET_ACCESS_KEY": R2_SECRET}
    assert credentials_from_env(env) == {
        "aws_access_key_id": R2_KEY,
        "aws_secret_access_key": R2_SECRET,
    }
    both = {**env, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    assert credentials_from_env(both)["aws_access_key_id"] == ACCESS_KEY  # a pair, not mixed
    half = {**env, "AWS_ACCESS_KEY_ID": ACCESS_KEY}  # the AWS pair incomplete: the R2 pair
    assert credentials_from_env(half)["aws_secret_access_key"] == R2_SECRET
    assert credentials_from_env({"R2_ACCESS_KEY_ID": R2_KEY}) == {}  # botocore's chain
