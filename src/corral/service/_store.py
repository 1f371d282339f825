"""The store a service call works on: the caller's, or one opened for the call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from corral.store import Store


@contextmanager
def using(store: Store | None) -> Iterator[Store]:
    """``store`` as is, or ``Store.open()`` closed again when the block ends."""
    if store is not None:
        yield store
        return
    opened = Store.open()
    try:
        yield opened
    finally:
        opened.close()
