"""Verified uploads to S3-compatible stores: single PUTs and multipart uploads.

Rules kept for both AWS S3 and Cloudflare R2 (see ``shared/providers/s3-r2.md``):

* parts are at least 5 MiB and at most 5 GiB - 5 MiB, **all of the same size** except the last
  (R2 requires it), at most 10,000 of them; a file's part size is
  ``max(part_size, ceil(size / 9000))`` rounded up to a MiB (:func:`part_size_for`);
* every request carries a plain ``x-amz-checksum-sha256`` header (base64 of the raw digest) of
  its own body; a multipart upload is created with ``ChecksumAlgorithm=SHA256`` and completed
  with each part's checksum;
* the object's hex sha256 is stored as ``x-amz-meta-sha256`` when it is known before the upload
  starts (single PUTs, :func:`upload_file`), the portable copy where a server keeps no checksum;
* stores are not trusted to check any of it (moto accepts wrong checksums; whether R2 checks is
  not confirmed), so every upload is verified afterwards by ``HEAD``: size, ETag (MD5 of the
  body, or MD5 of the parts' MD5s + ``-N``; skipped under SSE-KMS/SSE-C, where the ETag is not an
  MD5), the stored SHA-256 checksum when the server returns one (whole, or composite for
  multipart), and the sha256 metadata. A single PUT that the store reports (``BadDigest``) or
  holds corrupted is sent again (its body is in memory), up to 3 times; then, as for a
  multipart upload, the bad object is deleted and :class:`StorageIntegrityError` raised.

A failed multipart upload is aborted, so it leaves no parts behind.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from corral.errors import BadInput
from corral.storage.errors import SourceMismatch, StorageError, StorageIntegrityError

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * 1024 * MiB - 5 * MiB
MAX_PARTS = 10_000
#: Parts per file aimed at by :func:`part_size_for` (headroom below MAX_PARTS).
TARGET_MAX_PARTS = 9_000
DEFAULT_PART_SIZE = 16 * MiB
DIGEST_RETRIES = 3

Call = Callable[..., Any]  # runs one client operation, mapping its errors (S3Storage._call)


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def validate_part_size(part_size: int) -> int:
    if isinstance(part_size, bool) or not isinstance(part_size, int):
        raise BadInput(f"part_size must be an integer number of bytes, got {part_size!r}")
    if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
        raise BadInput(
            f"part_size must be between 5 MiB and 5 GiB - 5 MiB (S3/R2 limits), got {part_size}"
        )
    return part_size


def part_size_for(size: int, minimum: int = DEFAULT_PART_SIZE) -> int:
    """The one part size for a ``size``-byte file: at least ``minimum``, few enough parts."""
    need = math.ceil(size / TARGET_MAX_PARTS)
    part = max(minimum, math.ceil(need / MiB) * MiB)
    if part > MAX_PART_SIZE:
        raise StorageError(f"a file of {size} bytes is larger than S3/R2 objects can be")
    return part


class PartDigests:
    """The MD5 and SHA-256 of each part, for the multipart ETag and composite checksum."""

    def __init__(self) -> None:
        self.md5: list[bytes] = []
        self.sha256: list[bytes] = []

    def etag(self) -> str:
        return hashlib.md5(b"".join(self.md5), usedforsecurity=False).hexdigest() + (
            f"-{len(self.md5)}"
        )

    def composite_sha256(self) -> str:
        return b64(hashlib.sha256(b"".join(self.sha256)).digest())


def put_verified(call: Call, bucket: str, key: str, body: bytes, sha256_hex: str) -> None:
    """One PUT with its SHA-256 checksum header and metadata, verified by HEAD; tried again
    (the body is in memory) when the store reports or holds a corrupted body. An object that
    never verified is deleted."""
    checksum = b64(bytes.fromhex(sha256_hex))
    md5_hex = hashlib.md5(body, usedforsecurity=False).hexdigest()

    def attempt() -> None:
        call(
            "put_object",
            Bucket=bucket,
            Key=key,
            Body=body,
            ChecksumSHA256=checksum,
            Metadata={"sha256": sha256_hex},
        )
        verify_object(call, bucket, key, size=len(body), sha256_hex=sha256_hex, md5_hex=md5_hex)

    try:
        _retry_digest(attempt)
    except StorageIntegrityError:
        _delete_quietly(call, bucket, key)
        raise


def _retry_digest(fn: Callable[[], Any]) -> Any:
    for attempt in range(DIGEST_RETRIES):
        try:
            return fn()
        except StorageIntegrityError:
            if attempt == DIGEST_RETRIES - 1:
                raise
    return None


def _delete_quietly(call: Call, bucket: str, key: str) -> None:
    try:
        call("delete_object", Bucket=bucket, Key=key)
    except (StorageError, FileNotFoundError):
        pass  # the caller reports the first error


class Multipart:
    """One multipart upload: parts may be uploaded from several threads."""

    def __init__(self, call: Call, bucket: str, key: str, sha256_hex: str | None = None):
        self._call, self.bucket, self.key = call, bucket, key
        meta = {"sha256": sha256_hex} if sha256_hex else {}
        answer = call(
            "create_multipart_upload",
            Bucket=bucket,
            Key=key,
            ChecksumAlgorithm="SHA256",
            Metadata=meta,
        )
        self.upload_id = answer["UploadId"]
        self._parts: dict[int, tuple[str, bytes, bytes]] = {}  # number -> etag, md5, sha256
        self._lock = threading.Lock()

    def upload_part(self, number: int, body: bytes | bytearray | memoryview) -> None:
        if number > MAX_PARTS:
            raise StorageError(
                f"s3://{self.bucket}/{self.key}: more than {MAX_PARTS} parts "
                "(use a larger part_size)"
            )
        data = bytes(body)
        md5 = hashlib.md5(data, usedforsecurity=False).digest()
        sha = hashlib.sha256(data).digest()
        answer = _retry_digest(
            lambda: self._call(
                "upload_part",
                Bucket=self.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=data,
                ChecksumSHA256=b64(sha),
            )
        )
        with self._lock:
            self._parts[number] = (answer["ETag"], md5, sha)

    def complete(self) -> PartDigests:
        numbers = sorted(self._parts)
        if numbers != list(range(1, len(numbers) + 1)):
            raise StorageError(f"s3://{self.bucket}/{self.key}: parts missing before complete")
        digests = PartDigests()
        parts = []
        for n in numbers:
            etag, md5, sha = self._parts[n]
            parts.append({"PartNumber": n, "ETag": etag, "ChecksumSHA256": b64(sha)})
            digests.md5.append(md5)
            digests.sha256.append(sha)
        self._call(
            "complete_multipart_upload",
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": parts},
        )
        return digests

    def complete_verified(self, size: int, sha256_hex: str | None) -> None:
        """Complete the upload and check the object by HEAD; a bad object is deleted."""
        parts = self.complete()
        try:
            verify_object(
                self._call, self.bucket, self.key, size=size, sha256_hex=sha256_hex, parts=parts
            )
        except StorageIntegrityError:
            _delete_quietly(self._call, self.bucket, self.key)
            raise

    def abort(self) -> None:
        try:
            self._call(
                "abort_multipart_upload", Bucket=self.bucket, Key=self.key, UploadId=self.upload_id
            )
        except (StorageError, FileNotFoundError):
            pass  # best effort: stores also expire unfinished uploads (R2: after 7 days)


def verify_object(
    call: Call,
    bucket: str,
    key: str,
    *,
    size: int,
    sha256_hex: str | None,
    md5_hex: str | None = None,
    parts: PartDigests | None = None,
) -> None:
    """``HEAD`` the object and check it is what was sent (see the module docstring)."""
    head = call("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    where = f"s3://{bucket}/{key}"
    if head.get("ContentLength") != size:
        raise StorageIntegrityError(
            f"{where}: the store holds {head.get('ContentLength')} bytes, {size} were sent"
        )
    encrypted = head.get("SSECustomerAlgorithm") or str(
        head.get("ServerSideEncryption") or ""
    ).startswith("aws:kms")
    expected_etag = parts.etag() if parts is not None else md5_hex
    etag = str(head.get("ETag") or "").strip('"')
    if expected_etag and etag and not encrypted and etag != expected_etag:
        raise StorageIntegrityError(f"{where}: ETag {etag} does not match what was sent")
    stored = head.get("ChecksumSHA256")
    if stored:
        if parts is not None:
            comp = parts.composite_sha256()
            allowed = {comp, f"{comp}-{len(parts.md5)}"}
        else:
            allowed = {b64(bytes.fromhex(sha256_hex))} if sha256_hex else set()
        if allowed and stored not in allowed:
            raise StorageIntegrityError(f"{where}: stored SHA-256 does not match what was sent")
    meta = (head.get("Metadata") or {}).get("sha256")
    if meta and sha256_hex and meta != sha256_hex:
        raise StorageIntegrityError(f"{where}: sha256 metadata does not match what was sent")


class S3Writer:
    """``Storage.open_write`` for S3: buffers one part in memory; a file that fits in one part
    is one PUT at ``close()``, a bigger one a multipart upload whose parts go out as they fill.
    ``close()`` returns once the object is complete and verified; ``abort()`` drops it."""

    def __init__(self, call: Call, bucket: str, key: str, part_size: int):
        self._call, self.bucket, self.key = call, bucket, key
        self._part_size = part_size
        self._buf = bytearray(part_size)
        self._fill = 0
        self._size = 0
        self._sha = hashlib.sha256()
        self._upload: Multipart | None = None
        self._parts = 0
        self._closed = False

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        self._sha.update(view)
        done = 0
        try:
            while done < total:
                if self._fill == self._part_size:  # full, and more data comes: send it
                    self._flush_part()
                n = min(self._part_size - self._fill, total - done)
                self._buf[self._fill : self._fill + n] = view[done : done + n]
                self._fill += n
                done += n
        except BaseException:
            self.abort()
            raise
        self._size += total
        return total

    def _flush_part(self) -> None:
        if self._upload is None:
            self._upload = Multipart(self._call, self.bucket, self.key)
        self._parts += 1
        self._upload.upload_part(self._parts, memoryview(self._buf)[: self._fill])
        self._fill = 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        sha_hex = self._sha.hexdigest()
        try:
            if self._upload is None:
                put_verified(
                    self._call, self.bucket, self.key, bytes(self._buf[: self._fill]), sha_hex
                )
            else:
                self._flush_part()  # the last part (never empty: a full buffer waits for data)
                self._upload.complete_verified(self._size, None)
        except BaseException:
            if self._upload is not None:
                self._upload.abort()
            raise
        finally:
            self._buf = bytearray()

    def abort(self) -> None:
        """Drop the upload (after a failure): nothing is published."""
        if self._closed:
            return
        self._closed = True
        self._buf = bytearray()
        if self._upload is not None:
            self._upload.abort()

    def __enter__(self) -> S3Writer:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _read_full(f: Any, n: int) -> bytes:
    """Up to ``n`` bytes, fewer only at the end of the file (a raw read may return less, e.g.
    Linux caps one read at ~2 GiB): parts must all have the same size."""
    chunks = []
    left = n
    while left > 0:
        chunk = f.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(16 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def upload_file(
    call: Call,
    bucket: str,
    key: str,
    local_path: str,
    *,
    sha256: str | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    concurrency: int = 4,
) -> tuple[int, str]:
    """Upload a local file, verified. With ``sha256`` (hex) the file must have that digest:
    it is checked while the file is read and a mismatch (:class:`SourceMismatch`) publishes
    nothing. Parts go out ``concurrency`` at a time. Returns ``(size, sha256)``."""
    size = os.path.getsize(local_path)
    expected = sha256 or file_sha256(local_path)
    where = f"{local_path}"
    if size <= part_size:
        with open(local_path, "rb") as f:
            body = f.read(size + 1)
        got = hashlib.sha256(body).hexdigest()
        if len(body) != size or got != expected:
            raise SourceMismatch(f"{where} does not match its expected sha256")
        put_verified(call, bucket, key, body, expected)
        return size, expected
    part = part_size_for(size, part_size)
    upload = Multipart(call, bucket, key, expected)
    digest = hashlib.sha256()
    slots = threading.BoundedSemaphore(max(1, concurrency))
    futures: list[Future[None]] = []
    try:
        with ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="corral-s3-part") as pool:
            with open(local_path, "rb", buffering=0) as f:
                number = 0
                while True:
                    chunk = _read_full(f, part)
                    if not chunk:
                        break
                    digest.update(chunk)
                    number += 1
                    slots.acquire()
                    if any(fut.done() and fut.exception() for fut in futures):
                        slots.release()
                        break  # a part failed: stop reading, report it below
                    future = pool.submit(upload.upload_part, number, chunk)
                    future.add_done_callback(lambda _f: slots.release())
                    futures.append(future)
            for fut in futures:
                fut.result()
        if digest.hexdigest() != expected:
            raise SourceMismatch(f"{where} does not match its expected sha256")
        upload.complete_verified(size, expected)
    except BaseException:
        upload.abort()
        raise
    return size, expected
