"""What a container provider sends its node in environment variables: the boot blob (the plan
as the controller built it, the agent token and the job's env; gzip + base64, optionally in
pieces), and DNS-label names that carry a launch key.

A container cloud's only channel to the node at create time is the container's environment;
:func:`pack` and :func:`unpack` are the two ends of it, :func:`chunks` and :func:`joined` split
and join a value for clouds that bound the length of one value. The node side (a provider's
``boot`` module) imports only this module, the standard library and :mod:`corral.wire`.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corral.providers.base import Bootstrap


def label_name(prefix: str, key: str, max_slug: int = 46) -> str:
    """``<prefix><key slug>-<8 hex of the key's sha256>``: a DNS label (lower case, digits,
    '-') unique per key, since keys may hold '_', '.' and capitals."""
    slug = re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-")[:max_slug].strip("-") or "run"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{prefix}{slug}-{digest}"


def pack(data: dict[str, Any]) -> str:
    return base64.b64encode(gzip.compress(json.dumps(data).encode(), mtime=0)).decode("ascii")


def unpack(value: str) -> dict[str, Any]:
    data = json.loads(gzip.decompress(base64.b64decode(value)))
    if not isinstance(data, dict):
        raise ValueError("the boot blob is not an object")
    return data


def boot_blob(bootstrap: Bootstrap) -> str:
    """The plan, the agent token and the job's env, packed."""
    return pack(
        {
            "plan": bootstrap.plan.model_dump(mode="json"),
            "token": bootstrap.token,
            "env": dict(bootstrap.env),
        }
    )


def read_blob(value: str) -> tuple[dict[str, Any], str, dict[str, str]]:
    """(plan, token, env) from a packed boot blob; ValueError if it holds none."""
    boot = unpack(value)
    plan, token, env = boot.get("plan"), boot.get("token"), boot.get("env") or {}
    if not isinstance(plan, dict) or not isinstance(token, str) or not token:
        raise ValueError("no plan or token")
    if not isinstance(env, dict):
        raise ValueError("env is not an object")
    return plan, token, {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}


def chunks(name: str, value: str, size: int) -> dict[str, str]:
    """``value`` in variables ``<name>_0``, ``<name>_1``... of at most ``size`` characters."""
    parts = [value[i : i + size] for i in range(0, len(value), size)] or [""]
    return {f"{name}_{i}": part for i, part in enumerate(parts)}


def joined(environ: dict[str, str], name: str, count: int) -> str:
    """The value :func:`chunks` split into ``count`` parts (ValueError if one is missing)."""
    parts = []
    for i in range(count):
        part = environ.get(f"{name}_{i}")
        if part is None:
            raise ValueError(f"{name}_{i} is missing")
        parts.append(part)
    return "".join(parts)


def node_dirs(plan: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[Path, Path]:
    """(state dir, checkpoint dir) of the attempt on a container's own disk, under its
    ``$HOME/.corral/runs/<run>/``: the plan's paths are the controller's, and a container
    keeps nothing of another (a new node starts empty: checkpoints come back from object
    storage). Passed to the agent as ``--state-dir`` and ``--checkpoint-dir``."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    run = home / ".corral" / "runs" / str(plan.get("run_id") or "run")
    return run / f"agent-a{int(plan.get('attempt') or 1)}", run / "checkpoints"
