"""Two-rank gloo jobs on loopback, as the distributed tests start them."""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, port: int, world_size: int = 2, **extra: str) -> dict[str, str]:
    """This process's environment plus what torchrun sets for ``rank`` (gloo on loopback)."""
    return {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        **extra,
    }
