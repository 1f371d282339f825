"""The store a long-lived front door (the HTTP server) holds for its whole life, so it does not
open the database on every request. Front doors never import ``corral.store`` themselves."""

from __future__ import annotations

from corral.store import Store

__all__ = ["Store", "open_store"]


def open_store(url: str | None = None) -> Store:
    """Open the database (``url``, else ``CORRAL_DATABASE_URL``, else SQLite under
    ``CORRAL_HOME``), its schema brought to head; safe to share between threads. The caller
    closes it."""
    return Store.open(url)
