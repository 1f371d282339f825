"""The packaged results of an attempt: ``results.tar.gz`` in the agent's state directory.

Layout inside the archive (the same as in artifact storage under ``<run_id>/``)::

    manifest.json
    artifacts/<workdir-relative path>     every file the manifest lists (eval report included)

It is written to a temporary name and renamed when complete, so a reader never sees a partial
archive. Each file is added with the size the manifest recorded; a file that changed size
since is an error (the archive would not match its manifest).
"""

from __future__ import annotations

import os
import tarfile
import threading
from pathlib import Path

RESULTS = "results.tar.gz"
#: gzip level: artifacts are mostly already-dense weights, so a fast level loses little.
COMPRESS_LEVEL = 1


class PackageCancelled(Exception):
    pass


def build_package(
    dest: Path,
    manifest_path: Path,
    files: dict[str, Path],
    sizes: dict[str, int],
    cancel: threading.Event | None = None,
) -> Path:
    """Write ``dest`` (a ``.tar.gz``) from the manifest and the artifact files."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=COMPRESS_LEVEL) as tar:
            tar.add(str(manifest_path), arcname="manifest.json", recursive=False)
            for rel, real in sorted(files.items()):
                if cancel is not None and cancel.is_set():
                    raise PackageCancelled(dest.name)
                info = tar.gettarinfo(str(real), arcname=f"artifacts/{rel}")
                if info.size != sizes[rel]:
                    raise OSError(f"{rel} changed size after the manifest was written")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(real, "rb") as f:
                    tar.addfile(info, f)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return dest
