"""Leases: several controllers on one database, each live run babysat by exactly one of them,
and one at a time consuming the event feed (delivering the webhooks).

A lease is an owner and an expiry: ``runs.lease_owner``/``lease_expires_at`` for a run,
``event_positions.lease_owner``/``lease_expires_at`` for a consumer of the feed. A controller
takes what is free or expired and renews what it holds once half of its time is gone (so a
steady controller writes about twice per lease period, not on every loop); a controller that
dies loses its leases when they expire, and another takes them over. Taking is a conditional
UPDATE, so two controllers never both hold one lease.

The runs are shared out: each controller says it lives in ``controllers`` (renewed with its
leases, gone on a clean stop or once expired) and takes at most its share, the active runs
over the live controllers, rounded up; one over its share (a controller joined) gives its
newest RUNNING runs up, and the newcomer takes them.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from corral.store._core import StoreBase, aware_utc
from corral.store.states import ACTIVE_STATES

#: ids a statement names at most (SQLite builds before 3.32 take 999 parameters)
_CHUNK = 500


class LeaseOps(StoreBase):
    def lease_runs(
        self,
        owner: str,
        ttl_s: float,
        now: datetime | None = None,
        *,
        movable: Collection[str] = (),
    ) -> set[str]:
        """The ids of the active runs ``owner`` holds after renewing its own that are past
        half their time and taking free ones (never held, released, or expired) up to its
        fair share: the active runs over the live controllers (``controllers``, where each
        says it lives, renewed with its leases). A controller over its share (another one
        came) gives the excess of its RUNNING runs on the ``movable`` providers up (those whose
        machines every controller sees), free for the others after a quarter of a lease (a
        look of its own already under way ends first). Writes only when there is something
        to take, renew or give up."""
        now = aware_utc(now or self._now())
        d = self._db.dialect
        states = {f"s{i}": s for i, s in enumerate(sorted(ACTIVE_STATES))}
        in_states = f"state IN ({', '.join(':' + k for k in states)})"
        renew_before = now + timedelta(seconds=ttl_s / 2)
        free = "(lease_expires_at IS NULL OR lease_expires_at <= :now)"
        providers = {f"p{i}": name for i, name in enumerate(sorted(movable))}
        moves = (
            f"state = 'RUNNING' AND requested_action IS NULL AND provider IN "
            f"({', '.join(':' + k for k in providers)})"
            if providers
            else "1 = 0"
        )
        params = {**states, "me": owner, "renew": d.ts_in(renew_before), "now": d.ts_in(now)}
        # decided in SQL, as the UPDATE below decides it: a row is one id and three flags,
        # no timestamp parsed per row (ten thousand active runs are read)
        with self._db.transaction() as tx:
            rows = tx.tuples(
                "SELECT id, CASE WHEN lease_owner = :me AND lease_expires_at > :now THEN "
                "CASE WHEN lease_expires_at > :renew THEN 2 ELSE 1 END ELSE 0 END, "
                f"CASE WHEN {free} THEN 1 ELSE 0 END, "
                f"CASE WHEN {moves} THEN 1 ELSE 0 END "
                f"FROM runs WHERE {in_states} ORDER BY created_at, id",
                {**params, **providers},
            )
            # each controller: 2 if it is this one, fresh; 1 another one alive; 0 one gone
            known = tx.tuples(
                "SELECT CASE WHEN owner = :me THEN CASE WHEN expires_at > :renew THEN 2 "
                "ELSE 0 END WHEN expires_at > :now THEN 1 ELSE 0 END FROM controllers",
                params,
            )
        others = sum(1 for (k,) in known if k == 1)
        present = any(k == 2 for (k,) in known)
        share = -(-len(rows) // (others + 1))  # ceil
        mine = [(rid, kept, movable) for rid, kept, _, movable in rows if kept]
        # the newest of its RUNNING runs go to the others (the oldest stay where they are)
        surplus = max(0, len(mine) - share)
        given = [rid for rid, _, movable in reversed(mine) if movable][:surplus]
        take = max(0, share - (len(mine) - len(given)))
        held = {rid for rid, kept, _ in mine if kept == 2} - set(given)
        renew = any(kept == 1 for _, kept, _ in mine)
        takeable = take > 0 and any(f for _, _, f, _ in rows)
        if present and not given and not renew and not takeable:
            return held
        exp = d.ts_in(now + timedelta(seconds=ttl_s))
        with self._db.transaction(write=True) as tx:
            tx.run(
                "INSERT INTO controllers (owner, expires_at) VALUES (:me, :exp) "
                "ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at",
                {"me": owner, "exp": exp},
            )
            if len(known) > others + 1:  # gone ones (the row of this one is renewed)
                tx.run("DELETE FROM controllers WHERE expires_at <= :now", {"now": d.ts_in(now)})
            # given up: no holder, and free once a look already under way has ended
            grace = d.ts_in(now + timedelta(seconds=ttl_s / 4))
            for i in range(0, len(given), _CHUNK):
                chunk = {f"g{j}": rid for j, rid in enumerate(given[i : i + _CHUNK])}
                tx.run(
                    "UPDATE runs SET lease_owner = NULL, lease_expires_at = :grace "
                    f"WHERE lease_owner = :me AND id IN ({', '.join(':' + k for k in chunk)})",
                    {**chunk, "me": owner, "grace": grace},
                )
            # one statement for every run to renew or take, with no list of ids (ten
            # thousand runs would be ten thousand parameters): its own past half their time,
            # and up to ``take`` free ones, oldest first; the free condition is checked again
            # on each row as it is written (PostgreSQL re-reads a row another transaction
            # just took, and passes over those another is taking)
            got = tx.tuples(
                "UPDATE runs SET lease_owner = :me, lease_expires_at = :exp "
                f"WHERE {in_states} AND ((lease_owner = :me AND lease_expires_at > :now AND "
                f"lease_expires_at <= :renew) OR ({free} AND id IN (SELECT id FROM runs "
                f"WHERE {in_states} AND {free} ORDER BY created_at, id LIMIT :take"
                f"{d.skip_locked}))) RETURNING id",
                {**params, "exp": exp, "take": take},
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
        controller takes its runs at its next look instead of after the expiry; it no longer
        counts among the controllers sharing the runs."""
        with self._db.transaction(write=True) as tx:
            tx.run("DELETE FROM controllers WHERE owner = :me", {"me": owner})
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
