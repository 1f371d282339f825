"""Pack a bundle (the controller's side): collect, fingerprint, check the size, pack once.

``collect`` lists what goes in (the workdir through :func:`corral.bundle.ignore.walk`, the
``files:`` entries, extra members given as bytes). ``fingerprint`` hashes the list's paths,
sizes, modes and modification times: when it matches one already packed (``index.json`` in
the cache), the archive in the cache is used as is, so an unchanged workdir is neither read
nor packed again. Otherwise ``pack`` writes the archive into the cache while hashing it, and
names it by its sha256.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.bundle import COMPRESS_LEVEL, FILES_PREFIX, WORK_PREFIX
from corral.bundle.ignore import Never, walk
from corral.errors import BadInput
from corral.files import write_json_atomic

INDEX_FILE = "index.json"
#: fingerprints remembered in the cache's index (the newest)
INDEX_ENTRIES = 64
#: bundles kept in the cache (the newest by use); older ones are deleted
CACHE_BUNDLES = 32
#: read size when copying a file into the archive
CHUNK = 1024 * 1024

#: ``progress(done_bytes, total_bytes)`` while packing
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Item:
    """One member: its name in the archive, and the local file (None: ``data`` is it)."""

    member: str
    path: str | None
    size: int
    mode: int
    mtime_ns: int
    inode: int = 0
    link: str | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class Bundle:
    """A packed bundle in the cache."""

    sha256: str
    size: int
    path: Path
    #: how many members, and the bytes of their content before compression
    members: int
    content_bytes: int
    #: True when the archive came from the cache (nothing was read or packed)
    cached: bool = False


def collect(
    workdir: str | None,
    files: Iterable[tuple[str, str]] = (),
    extra: dict[str, bytes] | None = None,
    never: Never | None = None,
) -> list[Item]:
    """The members of a bundle: ``workdir``'s files under ``work/`` (less what ``never``
    refuses), each ``(index, local path)`` of ``files`` as ``files/<index>``, each ``extra``
    name with its bytes."""
    items: list[Item] = []
    if workdir is not None:
        for e in walk(workdir, never):
            link = _portable_link(workdir, e.rel, e.path) if e.is_link else None
            items.append(
                Item(
                    WORK_PREFIX + e.rel,
                    e.path,
                    0 if link is not None else e.st.st_size,
                    stat.S_IMODE(e.st.st_mode),
                    e.st.st_mtime_ns,
                    e.st.st_ino,
                    link,
                )
            )
    for index, local in files:
        try:
            st = os.stat(local)
        except OSError as exc:
            raise BadInput(f"files: {local}: {exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"files: {local} is not a file")
        items.append(
            Item(FILES_PREFIX + index, local, st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
        )
    for name, data in sorted((extra or {}).items()):
        items.append(Item(name, None, len(data), 0o644, 0, data=data))
    return items


def _portable_link(workdir: str, rel: str, path: str) -> str:
    """The target a symbolic link of the workdir travels with: its own when it stays inside
    the workdir, made relative when it is an absolute path into the workdir. A link out of the
    workdir cannot travel (the node has no such path, and unpacking refuses it):
    :class:`BadInput` now, before any machine is rented."""
    target = os.readlink(path)
    for root in dict.fromkeys((os.path.abspath(workdir), os.path.realpath(workdir))):
        parent = os.path.dirname(os.path.join(root, rel))
        resolved = os.path.normpath(os.path.join(parent, target))
        if resolved == root or resolved.startswith(root + os.sep):
            return os.path.relpath(resolved, parent) if os.path.isabs(target) else target
    raise BadInput(
        f"workdir: the link {rel} points to {target}, outside the workdir, which the machine "
        "does not have: copy what it points to into the workdir, or list the link in "
        ".corralignore"
    )


def fingerprint(items: list[Item]) -> str:
    """A digest of what the members are (paths, sizes, modes, times, inodes, link targets,
    the bytes of in-memory members): equal fingerprints mean an equal archive."""
    h = hashlib.sha256(b"corral-bundle-1\n")
    for it in items:
        extra = hashlib.sha256(it.data).hexdigest() if it.data is not None else ""
        line = f"{it.member}\0{it.size}\0{it.mode}\0{it.mtime_ns}\0{it.inode}\0{it.link}\0{extra}\n"
        h.update(line.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def content_bytes(items: list[Item]) -> int:
    return sum(it.size for it in items)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - the loop returns


def largest(items: list[Item], count: int = 5) -> list[tuple[str, int]]:
    """The ``count`` largest top-level paths of the workdir (a directory: the sum of what it
    ships) and of ``files:``, largest first."""
    sizes: dict[str, int] = {}
    for it in items:
        if it.member.startswith(WORK_PREFIX):
            rel = it.member[len(WORK_PREFIX) :]
            head, sep, _ = rel.partition("/")
            key = head + "/" if sep else head
        else:
            key = it.member
        sizes[key] = sizes.get(key, 0) + it.size
    return sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:count]


def check_size(items: list[Item], limit: int, *, field: str = "code.max_size") -> None:
    """:class:`BadInput` when the members' content exceeds ``limit`` bytes, listing the
    largest paths (nothing has been rented yet when this is called)."""
    total = content_bytes(items)
    if total <= limit:
        return
    top = ", ".join(f"{name} ({_human(size)})" for name, size in largest(items))
    raise BadInput(
        f"the code to ship is {_human(total)}, over {field} ({_human(limit)}); largest: {top}. "
        "Add what the job does not need to .corralignore (or .gitignore), or raise "
        f"{field}",
        fields={"size": total, "limit": limit},
    )


class _HashingWriter(io.RawIOBase):
    """A file that hashes and counts what is written to it."""

    def __init__(self, raw: io.BufferedWriter):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = self.raw.write(b)
        self.sha.update(b)
        self.count += len(b)
        return n


def _tarinfo(it: Item) -> tarfile.TarInfo:
    info = tarfile.TarInfo(it.member)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = it.mode & 0o777
    if it.link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = it.link
    else:
        info.size = it.size
    return info


def _write(tf: tarfile.TarFile, it: Item, tick: Callable[[int], None]) -> None:
    if it.data is not None:
        tf.addfile(_tarinfo(it), io.BytesIO(it.data))
        tick(it.size)
        return
    if it.link is not None:
        tf.addfile(_tarinfo(it))
        return
    assert it.path is not None
    with open(it.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size  # what is there now (it may have changed)
        info = _tarinfo(it)
        info.size = size
        tf.addfile(info, _Counted(f, tick))


class _Counted:
    """A file whose reads are reported to ``tick``."""

    def __init__(self, f: io.BufferedReader, tick: Callable[[int], None]):
        self.f = f
        self.tick = tick

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.tick(len(data))
        return data


def _index(cache: Path) -> dict[str, dict]:
    try:
        data = json.loads((cache / INDEX_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(cache: Path, fp: str, bundle: Bundle) -> None:
    index = _index(cache)
    index.pop(fp, None)
    index[fp] = {
        "sha256": bundle.sha256,
        "size": bundle.size,
        "members": bundle.members,
        "content_bytes": bundle.content_bytes,
        "used": time.time(),
    }
    entries = sorted(index.items(), key=lambda kv: kv[1].get("used", 0))[-INDEX_ENTRIES:]
    write_json_atomic(cache / INDEX_FILE, dict(entries), fsync=False)
    _prune(cache, {e["sha256"] for _, e in entries})


def _prune(cache: Path, keep: set[str]) -> None:
    """Delete the oldest bundles beyond :data:`CACHE_BUNDLES` that the index no longer names."""
    found = sorted(cache.glob("*.tar.gz"), key=lambda p: p.stat().st_mtime)
    for p in found[: max(0, len(found) - CACHE_BUNDLES)]:
        if p.name[: -len(".tar.gz")] not in keep:
            p.unlink(missing_ok=True)


def bundle_path(cache: Path, sha256: str) -> Path:
    return cache / f"{sha256}.tar.gz"


def keep(cache: Path, sha256: str, size: int, members: int = 0, content: int = 0) -> None:
    """Name a bundle that came into ``cache`` from elsewhere (an upload) in the index, so the
    cache keeps it among the newest like one packed here."""
    bundle = Bundle(sha256, size, bundle_path(cache, sha256), members, content)
    _remember(cache, f"upload:{sha256}", bundle)


def cached(cache: Path, items: list[Item]) -> Bundle | None:
    """The bundle of these members if it was packed before and is still in the cache."""
    fp = fingerprint(items)
    entry = _index(cache).get(fp)
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        return None
    path = bundle_path(cache, entry["sha256"])
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size != entry.get("size"):
        return None
    bundle = Bundle(
        entry["sha256"],
        size,
        path,
        int(entry.get("members", len(items))),
        int(entry.get("content_bytes", content_bytes(items))),
        cached=True,
    )
    _remember(cache, fp, bundle)
    return bundle


def pack(cache: str | Path, items: list[Item], progress: Progress | None = None) -> Bundle:
    """The bundle of ``items`` in ``cache``: from the cache when the fingerprint is known,
    else packed now (gzip level :data:`~corral.bundle.COMPRESS_LEVEL`) and named by its
    sha256."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    hit = cached(cache, items)
    if hit is not None:
        return hit
    total = content_bytes(items)
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    fd, tmp = tempfile.mkstemp(dir=cache, prefix=".pack-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            out = _HashingWriter(raw)
            gz = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=COMPRESS_LEVEL, mtime=0)
            with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tf:
                for it in items:
                    _write(tf, it, tick)
            gz.close()
            raw.flush()
        sha = out.sha.hexdigest()
        path = bundle_path(cache, sha)
        os.replace(tmp, path)
    except OSError as exc:
        raise BadInput(f"cannot pack the code: {exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    bundle = Bundle(sha, out.count, path, len(items), total)
    _remember(cache, fingerprint(items), bundle)
    return bundle
