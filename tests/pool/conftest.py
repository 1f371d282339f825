"""The pool tests' scratch pool: its own Redis keys on the local server (deleted after the
test), its settings in the environment, and ``pool`` as the only provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.queue.settings import PoolSettings
from support.pool import pool_env, scratch_pool


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[PoolSettings]:
    with scratch_pool() as settings:
        for name, value in pool_env(settings).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("CORRAL_PROVIDERS", "pool")
        yield settings
