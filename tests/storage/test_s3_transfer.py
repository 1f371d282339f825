"""Verified uploads: part sizes for S3 and R2, checksums, and corruption that moto would accept."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from corral.errors import BadInput
from corral.sdk.storage import open_storage
from corral.storage.errors import SourceMismatch, StorageIntegrityError
from corral.storage.s3_transfer import (
    MAX_PART_SIZE,
    MAX_PARTS,
    MIN_PART_SIZE,
    MiB,
    part_size_for,
    validate_part_size,
)

from .conftest import Bucket

PART = 5 * MiB  # the smallest part S3 and R2 accept


def body_of(params: dict) -> bytes:
    body = params["body"]
    if hasattr(body, "read"):  # botocore wraps some bodies in a file object
        pos = body.tell()
        data = body.read()
        body.seek(pos)
        return data
    return bytes(body)


def record(storage, operation: str) -> list[dict]:
    """The request params of every ``operation`` call the storage's client makes."""
    seen: list[dict] = []
    storage.client.meta.events.register(
        f"before-call.s3.{operation}",
        lambda params, **_: seen.append({**params, "body": body_of(params)}),
    )
    return seen


def corrupt(storage, operation: str, times: int = 10**9) -> None:
    """Flip a byte of the body of the next ``times`` ``operation`` requests after their checksum
    header was computed (a corruption in transit that moto does not notice)."""
    left = [times]

    def flip(params, **_):
        if left[0] > 0:
            left[0] -= 1
            body = bytearray(body_of(params))
            body[0] ^= 0xFF
            params["body"] = bytes(body)

    storage.client.meta.events.register(f"before-call.s3.{operation}", flip)


def test_part_size_keeps_parts_equal_few_and_within_limits() -> None:
    assert part_size_for(100 * MiB) == 16 * MiB  # the default
    assert part_size_for(100 * MiB, PART) == PART
    huge = 4 * 1024 * 1024 * MiB  # 4 TiB
    size = part_size_for(huge)
    assert size % MiB == 0 and huge / size <= MAX_PARTS and size <= MAX_PART_SIZE
    validate_part_size(MIN_PART_SIZE)
    for bad in (MIN_PART_SIZE - 1, MAX_PART_SIZE + 1, 5.5 * MiB, True):
        with pytest.raises(BadInput):
            validate_part_size(bad)


def test_multipart_parts_are_equal_sized_and_each_carries_its_sha256(bucket: Bucket) -> None:
    import base64

    st = open_storage(bucket.uri(), part_size=PART)
    parts = record(st, "UploadPart")
    creates = record(st, "CreateMultipartUpload")
    data = os.urandom(2 * PART + 12345)
    st.write_bytes(bucket.uri("f/streamed.bin"), data)
    sizes = [len(p["body"]) for p in parts]
    assert sizes == [PART, PART, 12345]
    for p in parts:
        digest = hashlib.sha256(p["body"]).digest()
        assert p["headers"]["x-amz-checksum-sha256"] == base64.b64encode(digest).decode()
    assert creates[0]["headers"]["x-amz-checksum-algorithm"] == "SHA256"
    assert bucket.get("f/streamed.bin") == data
    assert st.client.list_multipart_uploads(Bucket=bucket.name).get("Uploads", []) == []


def test_upload_file_checks_the_local_file_against_its_expected_sha256(
    bucket: Bucket, tmp_path: Path
) -> None:
    st = open_storage(bucket.uri(), part_size=PART)
    path = tmp_path / "weights.bin"
    data = os.urandom(2 * PART + 7)
    path.write_bytes(data)
    good = hashlib.sha256(data).hexdigest()
    assert st.upload_file(str(path), bucket.uri("w/weights.bin"), sha256=good) == len(data)
    head = bucket.client.head_object(Bucket=bucket.name, Key="w/weights.bin")
    assert head["Metadata"]["sha256"] == good and head["ETag"].strip('"').endswith("-3")
    with pytest.raises(SourceMismatch, match="does not match"):
        st.upload_file(str(path), bucket.uri("w/other.bin"), sha256="0" * 64)
    small = tmp_path / "small.bin"
    small.write_bytes(b"abc")
    with pytest.raises(SourceMismatch):
        st.upload_file(str(small), bucket.uri("w/small.bin"), sha256="0" * 64)
    assert bucket.list_keys() == ["w/weights.bin"]  # nothing published for a mismatch
    assert st.client.list_multipart_uploads(Bucket=bucket.name).get("Uploads", []) == []


def test_a_put_corrupted_in_transit_is_detected_and_sent_again(bucket: Bucket) -> None:
    st = open_storage(bucket.uri())
    corrupt(st, "PutObject", times=1)
    st.write_bytes(bucket.uri("c/once.bin"), b"important bytes")
    assert bucket.get("c/once.bin") == b"important bytes"
    corrupt(st, "PutObject")
    with pytest.raises(StorageIntegrityError, match="ETag"):
        st.write_bytes(bucket.uri("c/always.bin"), b"important bytes")
    assert bucket.list_keys("c/") == ["c/once.bin"]  # the bad object was deleted


def test_a_part_corrupted_in_transit_fails_the_upload_and_leaves_nothing(
    bucket: Bucket, tmp_path: Path
) -> None:
    st = open_storage(bucket.uri(), part_size=PART)
    corrupt(st, "UploadPart", times=1)
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(PART + 10))
    with pytest.raises(StorageIntegrityError, match="ETag"):
        st.upload_file(str(path), bucket.uri("c/big.bin"))
    assert bucket.list_keys() == []
