"""Code bundles between a remote CLI and ``corral server``, content-addressed by sha256.

The CLI's side: :func:`pack_for_server` packs the spec's workdir into the CLI's own cache
(``CORRAL_HOME/code``), refusing one over ``code.max_size`` before anything is sent. The
server's side: :func:`bundle_size` says whether a bundle is here, :class:`Upload` receives one
into the controller's code cache, verified by its sha256, where the controller finds it as it
finds a bundle it packed itself (:mod:`corral.control.shipping`).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral import paths
from corral.bundle.unpack import Mismatch
from corral.errors import BadInput
from corral.spec.code import MAX_CODE_GB

if TYPE_CHECKING:
    from corral.control.client_code import ClientCode

#: a bundle's name: its sha256, 64 lowercase hex digits (a front door's schema says so too)
SHA256_PATTERN = r"^[0-9a-f]{64}$"
_SHA256 = re.compile(SHA256_PATTERN)
#: the largest bundle one upload may be (bytes): the ceiling of ``code.max_size``
MAX_UPLOAD = int(MAX_CODE_GB * 1024**3)


def check_sha256(sha256: str) -> str:
    if not _SHA256.fullmatch(sha256):
        raise BadInput(f"bundle {sha256[:80]!r}: expected a sha256 (64 lowercase hex digits)")
    return sha256


def _cache() -> Path:
    from corral.control.shipping import cache_dir

    return cache_dir(paths.home())


def bundle_size(sha256: str) -> int | None:
    """The size of the bundle ``sha256`` in this machine's code cache, None if it is not."""
    from corral.bundle.pack import bundle_path

    try:
        return bundle_path(_cache(), check_sha256(sha256)).stat().st_size
    except OSError:
        return None


class Upload:
    """One bundle being received: written to a temporary file in the code cache while it is
    hashed, and made ``<sha256>.tar.gz`` there only when all ``size`` bytes came and their
    sha256 is the one announced (:class:`~corral.bundle.unpack.Mismatch` otherwise). Uploads
    of the same bundle at once each write their own file: the last verified one stays."""

    def __init__(self, sha256: str, size: int):
        self.sha256 = check_sha256(sha256)
        if size < 0 or size > MAX_UPLOAD:
            raise BadInput(f"size: {size} bytes, expected 0 to {MAX_UPLOAD} (code.max_size)")
        self.size = size
        self.received = 0
        self._hash = hashlib.sha256()
        cache = _cache()
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".upload-", suffix=".tmp")
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "wb")

    def feed(self, data: bytes) -> None:
        if self.received + len(data) > self.size:
            raise Mismatch(f"the upload is longer than the {self.size} bytes announced")
        self._file.write(data)
        self._hash.update(data)
        self.received += len(data)

    def finish(self) -> dict[str, Any]:
        """Verify and keep the bundle; its sha256 and size."""
        from corral.bundle.pack import bundle_path, keep

        self._file.close()
        if self.received != self.size:
            raise Mismatch(f"the upload ended at {self.received} of its {self.size} bytes")
        got = self._hash.hexdigest()
        if got != self.sha256:
            raise Mismatch(f"bundle checksum mismatch: the bytes received have sha256 {got}")
        os.replace(self._tmp, bundle_path(_cache(), self.sha256))
        keep(_cache(), self.sha256, self.size)
        return {"sha256": self.sha256, "size": self.size}

    def close(self) -> None:
        """Drop what a failed or unfinished upload wrote."""
        self._file.close()
        self._tmp.unlink(missing_ok=True)


def client_code(data: dict[str, Any]) -> ClientCode:
    """The :class:`~corral.control.client_code.ClientCode` a submit request names (its
    fields: those of the class but ``path`` and ``size``)."""
    from corral.control.client_code import ClientCode

    if data.get("sha256") is not None:
        check_sha256(str(data["sha256"]))
    return ClientCode(**data)


def pack_for_server(
    path: str | Path,
    *,
    overrides: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> ClientCode | None:
    """The CLI's side: the code of the spec at ``path`` packed here for a remote server (see
    :func:`corral.control.client_code.pack_on_client`). None: the server packs it itself,
    as when the workdir is not on this machine (a path only the server sees). BadInput for a
    bad spec, a workdir over ``code.max_size``."""
    from corral.control.client_code import pack_on_client
    from corral.service.submit import load

    spec, source = load(path, overrides=overrides)
    if not Path(spec.workdir).is_dir():
        return None  # only the server may see it (a path on its disk): it says if not
    return pack_on_client(spec, paths.home(), progress, source=source)
