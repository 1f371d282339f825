"""What the mirror of ``checkpoints.path`` looks at: the items at the paths, and which files
the job holds open for writing.

An *item* is one match of a checkpoint path: a file, or a directory with every file under it.
Its *content* (each file's name, size, mtime and inode) identifies one version of it: a
version that no process of the job holds open for writing and that did not change between two
looks is complete (the writer closed it).

The open files are read from ``/proc/<pid>/fd`` of the job's processes only (the agent and its
descendants, walked through ``/proc/<pid>/task/<tid>/children``), and only when some item is a
candidate, so a look that finds nothing new costs a glob and a few ``stat`` calls.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

RESTORE_SUFFIX = ".corral-restore"
OLD_SUFFIX = ".corral-old"
#: one file of an item: (path relative to the item, size, mtime_ns, ctime_ns, inode)
FileSig = tuple[str, int, int, int, int]
Content = tuple[tuple[str, int, int, int], ...]


@dataclass(frozen=True)
class Item:
    """One match of a checkpoint path: a file or a directory, relative to the workdir."""

    rel: str
    kind: str  # "file" or "dir"
    files: tuple[FileSig, ...]
    #: a directory's own mtime and ctime (0 for a file)
    dir_times: tuple[int, int] = (0, 0)
    #: the inode at the item's path (the file's, or the directory's)
    ino: int = 0

    @property
    def newest_mtime_ns(self) -> int:
        return max((f[2] for f in self.files), default=0)

    @property
    def renamed(self) -> bool:
        """Moved into place whole: a file whose status changed after its last write; a
        directory whose status changed after its last entry was made, and no later than its
        files' last writes (timestamps are coarse: the rename may share their tick)."""
        if not self.files:
            return False
        if self.kind == "file":
            return self.files[0][3] > self.files[0][2]
        mtime, ctime = self.dir_times
        return ctime > mtime and ctime >= self.newest_mtime_ns

    @property
    def content(self) -> Content:
        """What identifies this version of the item (ctimes left out: a rename is no change)."""
        return tuple((f[0], f[1], f[2], f[4]) for f in self.files)

    def real_files(self, workdir: str) -> set[str]:
        """The item's files as ``/proc/<pid>/fd`` links name them (symlinks resolved)."""
        base = os.path.realpath(os.path.join(workdir, self.rel))
        return {os.path.join(base, f[0]) if f[0] else base for f in self.files}


def safe_rel(text: str) -> bool:
    if not text or text.startswith("/") or "\\" in text or "\0" in text:
        return False
    parts = text.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def find_items(workdir: str, patterns: list[str]) -> list[Item]:
    """The items at ``patterns`` in ``workdir`` (oldest first by their newest file); files
    of corral's own restores, and empty directories, are left out."""
    found: dict[str, Item] = {}
    for pattern in patterns:
        for match in glob.glob(os.path.join(workdir, pattern), recursive=True):
            rel = os.path.relpath(match, workdir).replace(os.sep, "/")
            if rel in found or not safe_rel(rel) or rel.endswith((RESTORE_SUFFIX, OLD_SUFFIX)):
                continue
            item = item_at(match, rel)
            if item is not None and item.files:
                found[rel] = item
    # an item inside another (``out/*`` and ``out/ckpt-1/*``) is mirrored with its parent only
    rels = sorted(found)
    out = [
        found[r]
        for r in rels
        if not any(r.startswith(o + "/") for o in rels if o != r and found[o].kind == "dir")
    ]
    return sorted(out, key=lambda i: (i.newest_mtime_ns, i.rel))


def item_at(path: str, rel: str) -> Item | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        sig = ("", st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        return Item(rel, "file", (sig,), ino=st.st_ino)
    if not stat.S_ISDIR(st.st_mode):
        return None
    files: list[FileSig] = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                fst = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISREG(fst.st_mode):
                continue
            inner = os.path.relpath(full, path).replace(os.sep, "/")
            files.append((inner, fst.st_size, fst.st_mtime_ns, fst.st_ctime_ns, fst.st_ino))
    return Item(rel, "dir", tuple(files), (st.st_mtime_ns, st.st_ctime_ns), st.st_ino)


def process_tree(root: int) -> list[int] | None:
    """``root`` and its live descendants (``/proc/<pid>/task/<tid>/children``); None without
    procfs, where open files cannot be seen."""
    if not os.path.isdir(f"/proc/{root}/task"):
        return None
    out: list[int] = []
    todo = [root]
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                continue
    return out


def open_for_writing(paths: Iterable[str], pids: Iterable[int]) -> dict[str, set[int]]:
    """Those of ``paths`` that one of ``pids`` holds open for writing (``/proc/<pid>/fd``
    links, and the flags in ``fdinfo``), each with the pids that hold it."""
    wanted = set(paths)
    found: dict[str, set[int]] = {}
    if not wanted:
        return found
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if target not in wanted or pid in found.get(target, ()):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
                    flags = next(
                        int(line.split()[1], 8) for line in info if line.startswith("flags:")
                    )
            except (OSError, StopIteration, ValueError, IndexError):
                continue
            if flags & (os.O_WRONLY | os.O_RDWR):
                found.setdefault(target, set()).add(pid)
    return found


def alive(pid: int) -> bool:
    """The process runs still: not gone, not a zombie (a killed child not reaped yet has
    closed every file it held, whatever it was writing)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X", "x")
