"""S3Storage keeps the SDK's Storage protocol (against a moto server on loopback)."""

from __future__ import annotations

import pytest

from corral.errors import BadInput
from corral.sdk.storage import LocalStorage, Storage, open_storage, resolve_location
from corral.storage.s3 import S3Storage

from .conftest import Bucket


def test_open_storage_returns_s3_storage_with_options_for_s3_uris(s3_env: str) -> None:
    storage, path = resolve_location("s3://my-bucket/runs/", endpoint_url="https://x.example:9000")
    assert isinstance(storage, S3Storage) and isinstance(storage, Storage)
    assert path == "s3://my-bucket/runs"
    assert storage.settings.endpoint_url == "https://x.example:9000"
    assert open_storage("s3://my-bucket").settings.endpoint_url == s3_env  # from the env
    with pytest.raises(BadInput, match="apply to s3:// only"):
        open_storage("/tmp/x", endpoint_url="https://x.example")
    with pytest.raises(BadInput, match="'gs://' is not supported"):
        open_storage("gs://bucket/x")
    assert isinstance(open_storage("file:///tmp/x"), LocalStorage)


def test_settings_pick_the_r2_region_and_reject_bad_endpoints(monkeypatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    r2 = S3Storage(endpoint_url="https://0123abcd.r2.cloudflarestorage.com", environ={})
    assert r2.settings.region == "auto"
    assert S3Storage(environ={}).settings.region == "us-east-1"
    with pytest.raises(BadInput, match="http"):
        S3Storage(endpoint_url="ftp://host", environ={})
    with pytest.raises(BadInput, match="part_size"):
        S3Storage(part_size=1024, environ={})


def test_files_and_directories_behave_like_the_local_storage(bucket: Bucket) -> None:
    st = open_storage(bucket.uri())
    root = st.join(bucket.uri("run"), "ckpt-1")
    assert root == f"s3://{bucket.name}/run/ckpt-1"
    assert st.listdir(root) == [] and not st.isdir(root)
    st.makedirs(root)  # nothing to create in an object store
    st.write_bytes(st.join(root, "a.bin"), b"alpha")
    st.write_bytes(st.join(root, "sub", "b.bin"), b"beta")
    assert st.isdir(root) and st.isdir(bucket.uri("run"))
    assert st.listdir(root) == ["a.bin", "sub"]
    assert st.listdir(bucket.uri("run")) == ["ckpt-1"]
    assert st.isfile(st.join(root, "a.bin")) and not st.isfile(st.join(root, "sub"))
    assert st.size(st.join(root, "a.bin")) == 5
    assert st.read_bytes(st.join(root, "sub", "b.bin")) == b"beta"
    with st.open_read(st.join(root, "a.bin")) as f:
        buf = bytearray(10)
        assert f.readinto(buf) == 5 and bytes(buf[:5]) == b"alpha"
    for missing in (st.size, st.read_bytes, st.open_read):
        with pytest.raises(FileNotFoundError):
            missing(st.join(root, "nope"))
    st.remove(st.join(root, "nope"))  # a missing file: nothing to do
    st.rename(root, st.join(bucket.uri("run"), "ckpt-2"))
    assert bucket.list_keys() == ["run/ckpt-2/a.bin", "run/ckpt-2/sub/b.bin"]
    st.remove(bucket.uri("run/ckpt-2/a.bin"))
    st.rmtree(bucket.uri("run"))
    st.rmtree(bucket.uri("run"))  # already gone
    assert bucket.list_keys() == []


def test_listing_and_deleting_go_page_by_page(bucket: Bucket) -> None:
    st = open_storage(bucket.uri())
    st.list_page_size, st.delete_batch = 3, 2  # 1000 in real use
    for i in range(7):
        bucket.put(f"many/f{i}", b"")
        bucket.put(f"many/d{i}/x", b"")
    names = st.listdir(bucket.uri("many"))
    assert names == sorted([f"f{i}" for i in range(7)] + [f"d{i}" for i in range(7)])
    st.rmtree(bucket.uri("many"))
    assert bucket.list_keys() == []


def test_uploads_carry_the_sha256_as_checksum_and_metadata(bucket: Bucket) -> None:
    import base64
    import hashlib

    st = open_storage(bucket.uri())
    sent: list[dict] = []
    bucket_events = st.client.meta.events
    bucket_events.register("before-call.s3.PutObject", lambda params, **_: sent.append(params))
    st.write_bytes(bucket.uri("x/data.bin"), b"payload")
    digest = hashlib.sha256(b"payload")
    headers = sent[0]["headers"]
    assert headers["x-amz-checksum-sha256"] == base64.b64encode(digest.digest()).decode()
    assert "aws-chunked" not in str(headers.get("Content-Encoding", ""))  # no R2-hostile trailer
    head = bucket.client.head_object(Bucket=bucket.name, Key="x/data.bin")
    assert head["Metadata"]["sha256"] == digest.hexdigest()
