"""What a container provider sends its node in environment variables: the boot blob in the
one delivery format of :mod:`corral.agent.boot` (the plan as the controller built it, the
agent token and the job's env; gzip + base64, in one-line values of at most 1,000 characters),
and DNS-label names that carry a launch key.

A container cloud's only channel to the node at create time is the container's environment:
:func:`boot_env` is the controller's end of it, :func:`corral.agent.boot.take_delivery` the
node's.
"""

from __future__ import annotations

import hashlib
import re

from corral.agent.boot import Delivered, delivery_env
from corral.providers.base import Bootstrap


def label_name(prefix: str, key: str, max_slug: int = 46) -> str:
    """``<prefix><key slug>-<8 hex of the key's sha256>``: a DNS label (lower case, digits,
    '-') unique per key, since keys may hold '_', '.' and capitals."""
    slug = re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-")[:max_slug].strip("-") or "run"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{prefix}{slug}-{digest}"


def boot_env(bootstrap: Bootstrap) -> dict[str, str]:
    """The environment values that deliver ``bootstrap``'s plan, token and job env."""
    plan = bootstrap.plan.model_dump(mode="json")
    return delivery_env(Delivered(plan=plan, token=bootstrap.token, env=dict(bootstrap.env)))
