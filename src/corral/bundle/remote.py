"""Files in object storage (``s3://``, ``file://``, a path) for code bundles and mounts: open a
storage by URI with the node's credentials, list a tree, get and put one file.

The storage clients (:mod:`corral.sdk.storage`, :mod:`corral.storage`) load only when one of
these is called: neither the controller's launch path nor the agent's start-up pays for boto3
when nothing is in object storage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHUNK = 4 * 1024 * 1024


def storage_env(environ: Mapping[str, str], plan_env: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment, plus the object-store endpoint and region the plan names
    (they are not secret; credentials only ever come from the environment)."""
    from corral.storage.s3_client import ENDPOINT_VARS, REGION_VARS

    env = dict(environ)
    for var in (*ENDPOINT_VARS, *REGION_VARS):
        if plan_env.get(var):
            env[var] = plan_env[var]
    return env


def open_storage(uri: str, env: Mapping[str, str]) -> tuple[Any, str]:
    from corral.sdk.storage import resolve_location  # lazy: the storage clients are heavy

    options = {"environ": dict(env)} if uri.startswith("s3://") else {}
    return resolve_location(uri, **options)


def remote_files(storage: Any, base: str) -> list[tuple[str, int, str]]:
    """(relative path, size, version tag) of every file under ``base``."""
    under = getattr(storage, "files_under", None)
    if under is not None:
        return list(under(base))
    out = []
    for top, dirs, files in os.walk(base):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            st = os.stat(path)
            out.append(
                (os.path.relpath(path, base).replace(os.sep, "/"), st.st_size, str(st.st_mtime_ns))
            )
    return out


def get_file(storage: Any, remote: str, local: Path) -> int:
    """Download ``remote`` to ``local`` (through a temporary name). Returns the bytes."""
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.part")
    n = 0
    with storage.open_read(remote) as src, open(tmp, "wb") as dst:
        while data := src.read(CHUNK):
            dst.write(data)
            n += len(data)
    os.replace(tmp, local)
    return n


def put_file(storage: Any, local: Path, remote: str) -> int:
    upload = getattr(storage, "upload_file", None)
    if upload is not None:
        return int(upload(str(local), remote))
    storage.makedirs(os.path.dirname(remote))
    n = 0
    writer = storage.open_write(remote)
    try:
        with open(local, "rb") as src:
            while data := src.read(CHUNK):
                writer.write(data)
                n += len(data)
    finally:
        writer.close()
    return n
