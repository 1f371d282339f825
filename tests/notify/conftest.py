"""Fixtures for the webhook tests: a SQLite store with a fake clock, runs with webhooks, and
receivers on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hookkit import FakeClock
from hookreceiver import Receiver

from corral.store import Store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock, migrated_sqlite: Path) -> Iterator[Store]:
    """A migrated SQLite store (a copy of one migrated once) whose clock is ``clock``."""
    shutil.copyfile(migrated_sqlite, tmp_path / "corral.db")
    s = Store.open(f"sqlite:///{tmp_path}/corral.db", clock=clock.dt)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(**kw: Any) -> Receiver:
        r = Receiver(**kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()
