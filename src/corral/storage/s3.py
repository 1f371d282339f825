"""``s3://bucket/prefix`` as a :class:`~corral.sdk.storage.Storage` (AWS S3, Cloudflare R2, MinIO).

Paths are full ``s3://bucket/key`` strings; a "directory" is a key prefix ending in ``/``
(object stores have no directories: ``makedirs`` and ``fsync_dir`` do nothing, and a directory
exists while it holds an object). ``rename`` copies then deletes, so it is not atomic
(``atomic_rename = False``): the Checkpointer then writes a checkpoint's files straight into
its final prefix and its ``COMPLETE`` manifest last (a re-save of an existing step goes to a new
``ckpt-<step>.v<k>/`` prefix, and the old copy is deleted only once the new manifest exists), and
readers trust only a checkpoint whose manifest exists and whose files match its sha256s.

Uploads are verified (:mod:`corral.storage.s3_transfer`); downloads are checked by whoever reads
them against the checkpoint manifest (the manifest's sha256 is the truth). Errors are
:mod:`corral.storage.errors` exceptions, or ``FileNotFoundError`` for a missing object.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from corral.errors import BadInput
from corral.storage import s3_transfer as xfer
from corral.storage.s3_client import (
    S3Settings,
    is_boto_error,
    make_client,
    secret_values,
    settings_from_env,
    translate,
)

_COPY_MAX = 5 * 1024 * xfer.MiB - 5 * xfer.MiB  # one CopyObject request (R2's limit)


def split_uri(path: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")`` (BadInput for anything else)."""
    if not path.startswith("s3://"):
        raise BadInput(f"not an s3:// path: {path!r}")
    bucket, _, key = path[len("s3://") :].partition("/")
    if not bucket:
        raise BadInput(f"s3:// path without a bucket: {path!r}")
    return bucket, key.strip("/")


class _Reader(io.RawIOBase):
    """A GET's body as a raw binary file (``readinto`` fills as much as it can)."""

    def __init__(self, body: Any, path: str, storage: S3Storage):
        self._body, self._path, self._storage = body, path, storage

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        got = 0
        while got < len(view):
            try:
                chunk = self._body.read(len(view) - got)
            except Exception as exc:
                if is_boto_error(exc) or isinstance(exc, OSError):
                    raise self._storage._error(exc, "read", self._path) from None
                raise
            if not chunk:
                break
            view[got : got + len(chunk)] = chunk
            got += len(chunk)
        return got

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class S3Storage:
    """Objects in S3-compatible stores (see the module docstring).

    ``client``: a boto3 S3 client to use (tests, custom sessions); otherwise one is made on
    first use from ``endpoint_url``/``region`` and the environment (``environ``, default
    ``os.environ``: see :mod:`corral.storage.s3_client`). ``part_size``: bytes per multipart
    part (5 MiB .. 5 GiB - 5 MiB; larger files use larger parts); ``concurrency``: parts of one
    file uploaded at once.
    """

    atomic_rename = False
    #: Keys per listing page and per DeleteObjects request (the S3 maximum for both).
    list_page_size = 1000
    delete_batch = 1000

    def __init__(
        self,
        client: Any = None,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        part_size: int = xfer.DEFAULT_PART_SIZE,
        concurrency: int = 4,
        max_attempts: int | None = None,
        environ: Mapping[str, str] | None = None,
    ):
        self._environ = dict(os.environ if environ is None else environ)
        self.settings: S3Settings = settings_from_env(
            self._environ, endpoint_url=endpoint_url, region=region, max_attempts=max_attempts
        )
        self.part_size = xfer.validate_part_size(part_size)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise BadInput(f"concurrency must be an integer >= 1, got {concurrency!r}")
        self.concurrency = concurrency
        self._client = client
        self._client_lock = threading.Lock()
        self._secrets = secret_values(self._environ)

    # --- plumbing --------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                try:
                    self._client = make_client(self.settings, self._environ)
                except Exception as exc:  # e.g. AWS_PROFILE names a missing profile
                    if is_boto_error(exc):
                        raise self._error(exc, "connect to", self.settings.endpoint_label) from None
                    raise
            return self._client

    def _error(self, exc: BaseException, action: str, path: str) -> BaseException:
        mapped = translate(exc, action, path, self.settings)
        if hasattr(mapped, "message"):
            for value in self._secrets:
                mapped.message = mapped.message.replace(value, "***")
                mapped.args = (mapped.message,)
        return mapped

    def _caller(self, action: str, path: str) -> xfer.Call:
        """A function running one client operation with botocore errors mapped."""

        def call(operation: str, **kwargs: Any) -> Any:
            try:
                return getattr(self.client, operation)(**kwargs)
            except Exception as exc:
                if is_boto_error(exc):
                    raise self._error(exc, action, path) from None
                raise

        return call

    def _list(self, bucket: str, prefix: str, delimiter: str | None, path: str) -> Iterator[dict]:
        call = self._caller("list", path)
        kwargs: dict[str, Any] = {
            "Bucket": bucket,
            "Prefix": prefix,
            "MaxKeys": self.list_page_size,
        }
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            page = call("list_objects_v2", **kwargs)
            yield page
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def _keys_under(self, path: str) -> list[str]:
        bucket, key = split_uri(path)
        prefix = f"{key}/" if key else ""
        out: list[str] = []
        for page in self._list(bucket, prefix, None, path):
            out.extend(obj["Key"] for obj in page.get("Contents", []))
        return out

    def files_under(self, path: str) -> list[tuple[str, int, str]]:
        """Every object under ``path/``: (its key relative to ``path``, size, ETag), one
        listing for the whole tree."""
        bucket, key = split_uri(path)
        prefix = f"{key}/" if key else ""
        out: list[tuple[str, int, str]] = []
        for page in self._list(bucket, prefix, None, path):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix) :]
                if rel and not rel.endswith("/"):
                    out.append((rel, int(obj.get("Size", 0)), str(obj.get("ETag", "")).strip('"')))
        return out

    # --- the Storage protocol --------------------------------------------------------------

    def join(self, *parts: str) -> str:
        head, *rest = parts
        pieces = [head.rstrip("/")] + [p.strip("/") for p in rest if p.strip("/")]
        return "/".join(pieces)

    def isdir(self, path: str) -> bool:
        bucket, key = split_uri(path)
        prefix = f"{key}/" if key else ""
        call = self._caller("list", path)
        page = call("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)
        return bool(page.get("Contents") or page.get("CommonPrefixes"))

    def isfile(self, path: str) -> bool:
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def listdir(self, path: str) -> list[str]:
        bucket, key = split_uri(path)
        prefix = f"{key}/" if key else ""
        names: set[str] = set()
        for page in self._list(bucket, prefix, "/", path):
            names.update(
                p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])
            )
            names.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        names.discard("")
        return sorted(names)

    def makedirs(self, path: str) -> None:
        split_uri(path)  # nothing to create in an object store

    def size(self, path: str) -> int:
        bucket, key = split_uri(path)
        head = self._caller("stat", path)("head_object", Bucket=bucket, Key=key)
        return int(head["ContentLength"])

    def open_write(self, path: str) -> xfer.S3Writer:
        bucket, key = split_uri(path)
        return xfer.S3Writer(self._caller("write", path), bucket, key, self.part_size)

    def write_bytes(self, path: str, data: bytes) -> None:
        writer = self.open_write(path)
        try:
            writer.write(data)
        except BaseException:
            writer.abort()
            raise
        writer.close()

    def open_read(self, path: str) -> io.BufferedReader:
        bucket, key = split_uri(path)
        answer = self._caller("read", path)("get_object", Bucket=bucket, Key=key)
        return io.BufferedReader(_Reader(answer["Body"], path, self), buffer_size=xfer.MiB)

    def read_bytes(self, path: str) -> bytes:
        with self.open_read(path) as f:
            return f.read()

    def remove(self, path: str) -> None:
        bucket, key = split_uri(path)
        try:
            self._caller("delete", path)("delete_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            pass

    def rmtree(self, path: str) -> None:
        bucket, key = split_uri(path)
        keys = self._keys_under(path) + ([key] if key else [])
        call = self._caller("delete", path)
        step = self.delete_batch
        for start in range(0, len(keys), step):
            batch = [{"Key": k} for k in keys[start : start + step]]
            answer = call("delete_objects", Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
            failed = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if failed:
                raise self._error(_delete_failure(failed[0]), "delete", path)

    def rename(self, src: str, dst: str) -> None:
        """Copy every object under ``src`` (or ``src`` itself) to ``dst``, then delete ``src``.
        Not atomic."""
        sbucket, skey = split_uri(src)
        dbucket, dkey = split_uri(dst)
        under = self._keys_under(src)
        pairs = [(k, f"{dkey}/{k[len(skey) + 1 :]}") for k in under] or [(skey, dkey)]
        for source, target in pairs:
            self._copy(sbucket, source, dbucket, target)
        self.rmtree(src)

    def _copy(self, sbucket: str, skey: str, dbucket: str, dkey: str) -> None:
        path = f"s3://{dbucket}/{dkey}"
        size = self.size(f"s3://{sbucket}/{skey}")
        call = self._caller("copy", path)
        source = {"Bucket": sbucket, "Key": skey}
        if size <= _COPY_MAX:
            call("copy_object", Bucket=dbucket, Key=dkey, CopySource=source)
            return
        part = xfer.part_size_for(size, self.part_size)
        upload = call("create_multipart_upload", Bucket=dbucket, Key=dkey)["UploadId"]
        try:
            parts = []
            for number, start in enumerate(range(0, size, part), start=1):
                end = min(start + part, size) - 1
                answer = call(
                    "upload_part_copy",
                    Bucket=dbucket,
                    Key=dkey,
                    UploadId=upload,
                    PartNumber=number,
                    CopySource=source,
                    CopySourceRange=f"bytes={start}-{end}",
                )
                parts.append({"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]})
            call(
                "complete_multipart_upload",
                Bucket=dbucket,
                Key=dkey,
                UploadId=upload,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            call("abort_multipart_upload", Bucket=dbucket, Key=dkey, UploadId=upload)
            raise

    def fsync_dir(self, path: str) -> None:
        """Nothing to do: a completed upload is durable."""

    # --- extras ----------------------------------------------------------------------------

    def upload_file(self, local_path: str, path: str, *, sha256: str | None = None) -> int:
        """Upload a local file to ``path``, verified; with ``sha256`` the file must have that
        digest (else :class:`~corral.storage.errors.SourceMismatch`, nothing published).
        Returns the size."""
        bucket, key = split_uri(path)
        size, _ = xfer.upload_file(
            self._caller("upload", path),
            bucket,
            key,
            local_path,
            sha256=sha256,
            part_size=self.part_size,
            concurrency=self.concurrency,
        )
        return size

    def __repr__(self) -> str:
        return f"S3Storage(endpoint={self.settings.endpoint_label!r})"


def _delete_failure(error: dict) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": error.get("Code", ""), "Message": ""}}, "DeleteObjects")
