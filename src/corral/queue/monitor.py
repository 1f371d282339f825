"""Flower on the pool, with authentication on: ``corral pool monitor``.

Flower is started as ``python -m celery -A corral.queue.monitor flower`` (this module's
``app`` is the pool of the environment's ``CORRAL_POOL_*``). Its HTTP basic auth comes from the
environment (``FLOWER_BASIC_AUTH``), never from the command line, where ``ps`` would show it;
Flower's API then needs the same credentials (it is never opened with
``FLOWER_UNAUTHENTICATED_API``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from corral.errors import BadInput
from corral.queue.settings import ENV_BROKER, ENV_NAME, PoolSettings

APP_MODULE = "corral.queue.monitor"


def __getattr__(name: str) -> Any:  # ``app``, built when Celery's loader asks for it
    if name == "app":
        from corral.queue.app import make_app

        return make_app(PoolSettings.from_env())
    raise AttributeError(name)


def flower_command(
    settings: PoolSettings, *, address: str, port: int, user: str, password: str
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start Flower on ``settings``' pool."""
    if not user or ":" in user:
        raise BadInput("--user: a user name without ':'")
    if len(password) < 8:
        raise BadInput("the Flower password must have at least 8 characters")
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        APP_MODULE,
        "flower",
        f"--address={address}",
        f"--port={port}",
        "--persistent=False",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if k != "FLOWER_UNAUTHENTICATED_API"},
        ENV_BROKER: settings.broker_url,
        ENV_NAME: settings.name,
        "FLOWER_BASIC_AUTH": f"{user}:{password}",
    }
    return argv, env
