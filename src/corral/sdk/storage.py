"""Where checkpoints live: a small storage protocol and its local-filesystem implementation.

The :class:`~corral.sdk.checkpoint.Checkpointer` never touches ``os`` directly; it goes through a
:class:`Storage`, so an object store (``s3://...``, :mod:`corral.storage.s3`) is the same to it as a local
path. Paths are full strings in the storage's own syntax (a local path, or ``s3://bucket/key``);
:meth:`Storage.join` builds them.

The contract an implementation must keep:

* ``open_write(path)`` returns a binary writer; after ``close()`` returns, the file is durable
  (locally: flushed and fsynced once; in an object store: the upload is complete). A writer that
  is closed after an error may leave a partial file behind, never a file that looks whole
  to the checkpointer (the ``COMPLETE`` manifest is what makes a checkpoint exist).
* ``rename(src, dst)`` moves a directory tree. ``atomic_rename`` says whether that is one
  atomic step (POSIX ``rename(2)``). When it is not (object stores: copy then delete), the
  checkpointer does not rely on it: it writes straight into the final directory and writes the
  ``COMPLETE`` manifest last, so a checkpoint exists exactly when its manifest does.
* ``fsync_dir(path)`` makes the directory entries under ``path`` durable (a no-op where that has
  no meaning).
* Optional: ``map_file(path)`` returns a copy-on-write memory map of a file; readers use it
  when present (restore then reads straight from the page cache, without a copy).
* Missing paths: ``listdir`` of a missing directory returns ``[]``; ``rmtree`` and ``remove`` of
  a missing path do nothing; ``size``/``open_read``/``read_bytes`` raise ``FileNotFoundError``.
"""

from __future__ import annotations

import ctypes
import io
import mmap
import os
import shutil
import sys
import weakref
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from corral.errors import BadInput

#: Bytes per ``write``/``readinto`` call: large sequential I/O, few system calls.
CHUNK_BYTES = 16 * 1024 * 1024
#: Writes at least this large start their disk writeback at once.
_EARLY_WRITEBACK_BYTES = 1024 * 1024


#: What ``open_read`` gives: a binary file with ``read`` and ``readinto`` (a local file
#: unbuffered, an object's body buffered), to use as a context manager.
BinaryReader = io.RawIOBase | io.BufferedIOBase


@runtime_checkable
class Writer(Protocol):
    def write(self, data: bytes | memoryview, /) -> int: ...

    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """The operations the checkpointer needs from a place that holds files."""

    #: True when ``rename`` of a directory is a single atomic step.
    atomic_rename: bool

    def join(self, *parts: str) -> str: ...

    def isdir(self, path: str) -> bool: ...

    def isfile(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None: ...

    def size(self, path: str) -> int: ...

    def open_write(self, path: str) -> Writer: ...

    def write_bytes(self, path: str, data: bytes) -> None: ...

    def open_read(self, path: str) -> BinaryReader: ...

    def read_bytes(self, path: str) -> bytes: ...

    def remove(self, path: str) -> None: ...

    def rmtree(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...


def _load_sync_file_range() -> Any:
    """Linux ``sync_file_range(2)`` through ctypes (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        func = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


class _LocalWriter:
    """A raw (unbuffered) file whose ``close`` flushes it to disk with exactly one fsync.

    On Linux each write also starts the disk writeback of what it wrote
    (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which does not wait), so the disk works while
    the next chunk is hashed and copied and the final fsync has little left to do.
    """

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
        self._closed = False
        self._offset = 0

    def write(self, data: bytes | memoryview, /) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        done = 0
        while done < total:  # os.write may write less than asked for very large buffers
            done += os.write(self._fd, view[done : done + CHUNK_BYTES])
        if _sync_file_range is not None and total >= _EARLY_WRITEBACK_BYTES:
            _sync_file_range(self._fd, self._offset, total, _SYNC_FILE_RANGE_WRITE)
        self._offset += total
        return total

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)

    def abort(self) -> None:
        """Close without fsync (after a failure: the partial file is thrown away anyway)."""
        if not self._closed:
            self._closed = True
            os.close(self._fd)

    def __enter__(self) -> _LocalWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _load_libc_mmap() -> Any:
    """libc ``mmap``/``munmap``/``madvise`` through ctypes (None where unavailable)."""
    if os.name != "posix" or sys.version_info >= (3, 13):  # 3.13 has mmap(trackfd=False)
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mmap_, munmap, madvise = libc.mmap, libc.munmap, libc.madvise
    except (OSError, AttributeError):
        return None
    mmap_.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,
    ]
    mmap_.restype = ctypes.c_void_p
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    munmap.restype = ctypes.c_int
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return mmap_, munmap, madvise


_libc_mmap = _load_libc_mmap() if ctypes.sizeof(ctypes.c_void_p) == 8 else None
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map_private(fd: int, size: int) -> Any:
    """``size`` bytes of ``fd`` mapped private and writable (copy-on-write), holding no fd."""
    if size == 0:
        return bytearray()
    if _libc_mmap is None:
        if sys.version_info >= (3, 13):
            mapped = mmap.mmap(fd, size, access=mmap.ACCESS_COPY, trackfd=False)
        else:  # keeps a duplicate of fd open while the mapping lives
            mapped = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        try:
            mapped.madvise(mmap.MADV_WILLNEED)  # start reading ahead now (cold cache)
        except (AttributeError, OSError):
            pass
        return mapped
    mmap_, munmap, madvise = _libc_mmap
    prot = mmap.PROT_READ | mmap.PROT_WRITE
    address = mmap_(None, size, prot, mmap.MAP_PRIVATE, fd, 0)
    if address in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    try:
        if hasattr(mmap, "MADV_WILLNEED"):
            madvise(address, size, mmap.MADV_WILLNEED)  # start reading ahead (cold cache)
        buffer = (ctypes.c_char * size).from_address(address)
        # not at interpreter exit: a thread still running may read a restored tensor then
        weakref.finalize(buffer, munmap, address, size).atexit = False
    except BaseException:
        munmap(address, size)
        raise
    return buffer


class LocalStorage:
    """A directory tree on a local (or locally mounted) filesystem."""

    atomic_rename = True

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def isfile(self, path: str) -> bool:
        return os.path.isfile(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def makedirs(self, path: str) -> None:
        if os.path.isdir(path):
            return
        os.makedirs(path, exist_ok=True)
        # Make the new directory entry itself durable.
        self.fsync_dir(os.path.dirname(os.path.abspath(path)))

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def open_write(self, path: str) -> _LocalWriter:
        return _LocalWriter(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        writer = self.open_write(path)
        try:
            writer.write(data)
        except BaseException:
            getattr(writer, "abort", writer.close)()
            raise
        writer.close()

    def open_read(self, path: str) -> io.FileIO:
        return open(path, "rb", buffering=0)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def map_file(self, path: str) -> Any:
        """Optional capability: the file mapped copy-on-write (writes stay private), as a
        buffer (``len``, slicing, the buffer protocol) that unmaps when no longer referenced.

        The mapping keeps no file descriptor open (``mmap.mmap`` keeps a duplicate until it is
        closed): a restored state holds a mapping per tensor file for as long as it lives, and a
        large model has more tensor files than the usual limit of 1024 open files."""
        with open(path, "rb") as f:
            return _map_private(f.fileno(), os.fstat(f.fileno()).st_size)

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def rmtree(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            self.remove(path)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        try:
            fd = os.open(path or ".", os.O_RDONLY | _O_CLOEXEC)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:  # some filesystems refuse fsync on directories; nothing more to do
            pass
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return "LocalStorage()"


def open_storage(uri: str | os.PathLike[str], **options: Any) -> Storage:
    """The storage that holds ``uri``: a :class:`LocalStorage` for plain paths and ``file://``,
    an :class:`~corral.storage.s3.S3Storage` for ``s3://bucket/prefix``.

    ``options`` go to the S3 storage (``endpoint_url`` for S3-compatible stores such as
    Cloudflare R2 or MinIO, ``region``, ``part_size``, ``concurrency``, ``client``); credentials
    come from the environment (``AWS_ACCESS_KEY_ID``, ...). Other schemes (``gs://``, ...) raise
    :class:`~corral.errors.BadInput`.
    """
    return resolve_location(uri, **options)[0]


def resolve_location(uri: str | os.PathLike[str], **options: Any) -> tuple[Storage, str]:
    """The storage for ``uri`` and the full path inside it (local paths made absolute)."""
    text = os.fspath(uri)
    if not text:
        raise BadInput("checkpoint location is empty")
    parsed = urlparse(text)
    if parsed.scheme == "s3":
        from corral.storage.s3 import S3Storage, split_uri

        bucket, key = split_uri(text)
        return S3Storage(**options), f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
    if options:
        raise BadInput(f"storage options ({', '.join(sorted(options))}) apply to s3:// only")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise BadInput(f"file:// URI with a remote host is not supported: {text!r}")
        return LocalStorage(), os.path.abspath(unquote(parsed.path))
    if parsed.scheme == "" or "://" not in text:
        return LocalStorage(), os.path.abspath(os.path.expanduser(text))
    raise BadInput(
        f"checkpoint storage scheme {parsed.scheme + '://'!r} is not supported "
        "(use a local path, file:// or s3://)"
    )
