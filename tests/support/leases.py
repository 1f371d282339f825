"""A controller that says it lives and never takes a run (stuck in its loop, or broken): its
row in ``controllers`` renewed as a live controller's is, and nothing else."""

from __future__ import annotations

from datetime import timedelta

from corral.store import Store


def says_it_lives(store: Store, owner: str, ttl_s: float) -> None:
    """Renew ``owner``'s presence for ``ttl_s`` from the store's clock (a first one says it
    joined now)."""
    d = store._db.dialect
    now = store._now()
    with store._db.transaction(write=True) as tx:
        tx.run(
            "INSERT INTO controllers (owner, expires_at, took_at) VALUES (:o, :exp, :now) "
            "ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at",
            {"o": owner, "exp": d.ts_in(now + timedelta(seconds=ttl_s)), "now": d.ts_in(now)},
        )
