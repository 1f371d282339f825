"""Leases: several controllers on one database, each live run babysat by exactly one of them,
and one at a time consuming the event feed (delivering the webhooks).

A lease is an owner and an expiry: ``runs.lease_owner``/``lease_expires_at`` for a run,
``event_positions.lease_owner``/``lease_expires_at`` for a consumer of the feed. A controller
takes what is free or expired and renews what it holds once half of its time is gone (so a
steady controller writes about twice per lease period, not on every loop); a controller that
dies loses its leases when they expire, and another takes them over. Taking is a conditional
UPDATE, so two controllers never both hold one lease.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from corral.store._core import StoreBase, aware_utc
from corral.store.states import ACTIVE_STATES


class LeaseOps(StoreBase):
    def lease_runs(self, owner: str, ttl_s: float, now: datetime | None = None) -> set[str]:
        """The ids of the active runs ``owner`` holds after taking the free and expired ones
        and renewing its own that are past half their time. Writes only when there is
        something to take or renew."""
        now = aware_utc(now or self._now())
        d = self._db.dialect
        states = {f"s{i}": s for i, s in enumerate(sorted(ACTIVE_STATES))}
        in_states = f"state IN ({', '.join(':' + k for k in states)})"
        renew_before = now + timedelta(seconds=ttl_s / 2)
        # decided in SQL, as the UPDATE below decides it: a row is one id and two flags, no
        # timestamp parsed per row (ten thousand active runs are read every tick)
        with self._db.transaction() as tx:
            rows = tx.tuples(
                "SELECT id, CASE WHEN lease_owner = :me AND lease_expires_at > :renew "
                "THEN 1 ELSE 0 END, CASE WHEN lease_owner IS NULL OR lease_owner = :me OR "
                "lease_expires_at IS NULL OR lease_expires_at <= :now THEN 1 ELSE 0 END "
                f"FROM runs WHERE {in_states}",
                {**states, "me": owner, "renew": d.ts_in(renew_before), "now": d.ts_in(now)},
            )
        held = {rid for rid, kept, _ in rows if kept}
        if not any(free and not kept for _, kept, free in rows):
            return held
        # one statement for every run to take or renew, with no list of ids (ten thousand
        # runs would be ten thousand parameters; SQLite takes at most 32,766 in one): the rows
        # the SELECT's flags picked, less what another controller took since, plus runs that
        # became free since
        params = {
            **states,
            "me": owner,
            "now": d.ts_in(now),
            "renew": d.ts_in(renew_before),
            "exp": d.ts_in(now + timedelta(seconds=ttl_s)),
        }
        with self._db.transaction(write=True) as tx:
            got = tx.tuples(
                "UPDATE runs SET lease_owner = :me, lease_expires_at = :exp "
                f"WHERE {in_states} AND (lease_owner IS NULL OR lease_expires_at IS NULL "
                "OR lease_expires_at <= :now OR (lease_owner = :me AND lease_expires_at <= "
                ":renew)) RETURNING id",
                params,
            )
        return held | {rid for (rid,) in got}

    def holds_run(self, run_id: str, owner: str, now: datetime | None = None) -> bool:
        """Whether ``owner``'s lease on the run is still valid (a check before acting)."""
        now = aware_utc(now or self._now())
        with self._db.transaction() as tx:
            row = tx.one(
                "SELECT lease_owner, lease_expires_at FROM runs WHERE id = :id", {"id": run_id}
            )
        if row is None or row["lease_owner"] != owner:
            return False
        expires = self._db.dialect.ts_out(row["lease_expires_at"])
        return expires is not None and expires > now

    def release_runs(self, owner: str) -> int:
        """Give up every run lease of ``owner`` now (a controller stopping cleanly), so another
        controller takes its runs at its next look instead of after the expiry."""
        with self._db.transaction(write=True) as tx:
            return tx.run(
                "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL "
                "WHERE lease_owner = :me",
                {"me": owner},
            )

    def lease_consumer(
        self, consumer: str, owner: str, ttl_s: float, now: datetime | None = None
    ) -> bool:
        """Take or keep the lease on the feed consumer ``consumer`` (the webhook dispatcher);
        True while ``owner`` holds it. Writes only to take it or to renew it past half its
        time."""
        now = aware_utc(now or self._now())
        d = self._db.dialect
        with self._db.transaction() as tx:
            row = tx.one(
                "SELECT lease_owner, lease_expires_at FROM event_positions WHERE consumer = :c",
                {"c": consumer},
            )
        if row is not None:
            expires = d.ts_out(row["lease_expires_at"])
            if row["lease_owner"] == owner and expires is not None:
                if expires > now + timedelta(seconds=ttl_s / 2):
                    return True
            elif row["lease_owner"] is not None and expires is not None and expires > now:
                return False  # another controller holds it
        params = {
            "c": consumer,
            "me": owner,
            "now": d.ts_in(now),
            "exp": d.ts_in(now + timedelta(seconds=ttl_s)),
        }
        with self._db.transaction(write=True) as tx:
            first = {"consumer": consumer, "event_id": 0, "updated_at": now}
            self._insert(tx, "event_positions", first, unique=("consumer",), returning="consumer")
            got = tx.run(
                "UPDATE event_positions SET lease_owner = :me, lease_expires_at = :exp "
                "WHERE consumer = :c AND (lease_owner IS NULL OR lease_owner = :me "
                "OR lease_expires_at IS NULL OR lease_expires_at <= :now)",
                params,
            )
        return got == 1

    def release_consumer(self, consumer: str, owner: str) -> None:
        with self._db.transaction(write=True) as tx:
            tx.run(
                "UPDATE event_positions SET lease_owner = NULL, lease_expires_at = NULL "
                "WHERE consumer = :c AND lease_owner = :me",
                {"c": consumer, "me": owner},
            )
