"""Leases: several controllers on one database, each live run babysat by exactly one of them,
and one at a time consuming the event feed (delivering the webhooks).

A lease is an owner and an expiry: ``runs.lease_owner``/``lease_expires_at`` for a run,
``event_positions.lease_owner``/``lease_expires_at`` for a consumer of the feed. A controller
takes what is free or expired and renews what it holds once half of its time is gone, all of
it in one statement (so a steady controller writes about twice per lease period, not on every
loop, and its runs expire together); a controller that dies loses its leases when they expire,
and another takes them over. Taking is a conditional UPDATE, so two controllers never both hold
one lease.

The runs are shared out: each controller says it lives in ``controllers`` (renewed with its
leases, gone on a clean stop or once expired and its runs made free) and takes at most its
share, the active runs over the live controllers, rounded up; one over its share (a controller
joined) gives its newest RUNNING runs up, and the newcomer takes them. A run left free for
longer than a lease (a controller says it lives but takes nothing) is taken by any controller,
past its share.

What a controller reads is what it holds and the free runs, by their owner (``ix_runs_leases``:
its own, those of the controllers gone, and those of none), never every active run's expiry;
the runs of a controller gone are made free by the first one that sees it gone.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import NamedTuple

from corral.store._core import StoreBase, aware_utc
from corral.store.states import ACTIVE_RUNS_SQL

#: ids a statement names at most (SQLite builds before 3.32 take 999 parameters)
_CHUNK = 500
#: never held, given up, released, or expired
_FREE = "(lease_expires_at IS NULL OR lease_expires_at <= :now)"
#: free for longer than a lease (since its expiry, its release, or its creation)
_STRANDED = "COALESCE(lease_expires_at, created_at) <= :stranded"


class LeaseShare(NamedTuple):
    """What :meth:`LeaseOps.lease_share` found: the runs held, and how many are active."""

    held: frozenset[str]
    active: int


class LeaseOps(StoreBase):
    def lease_runs(
        self,
        owner: str,
        ttl_s: float,
        now: datetime | None = None,
        *,
        movable: Collection[str] = (),
    ) -> set[str]:
        """The ids of the active runs ``owner`` holds (:meth:`lease_share`)."""
        return set(self.lease_share(owner, ttl_s, now, movable=movable).held)

    def lease_share(
        self,
        owner: str,
        ttl_s: float,
        now: datetime | None = None,
        *,
        movable: Collection[str] = (),
    ) -> LeaseShare:
        """The active runs ``owner`` holds after renewing its own (all of them, once one is
        past half its time) and taking free ones (never held, released, given up, or
        expired) up to its fair share: the active runs over the live controllers
        (``controllers``, where each says it lives, renewed with its leases). A run free for
        longer than a lease is taken past the share (no live controller took it). A
        controller over its share (another one came) gives the excess of its RUNNING runs on
        the ``movable`` providers up (those whose machines every controller sees), free for
        the others after a quarter of a lease (a look of its own already under way ends
        first), while another controller takes runs (it joined, or took some, within a
        lease). The runs of a controller gone (its presence expired) are made free. Reads
        this controller's runs and the free ones, not every active run; writes only when
        there is something to take, renew or give up."""
        now = aware_utc(now or self._now())
        d = self._db.dialect
        params = {
            "me": owner,
            "now": d.ts_in(now),
            "renew": d.ts_in(now + timedelta(seconds=ttl_s / 2)),
            "stranded": d.ts_in(now - timedelta(seconds=ttl_s)),
        }
        providers = {f"p{i}": name for i, name in enumerate(sorted(movable))}
        moves = (
            f"state = 'RUNNING' AND requested_action IS NULL AND provider IN "
            f"({', '.join(':' + k for k in providers)})"
            if providers
            else "1 = 0"
        )
        with self._db.transaction() as tx:
            # each controller: alive, fresh (not past half its time), and taking runs (it
            # took some, or joined, within a lease)
            known = tx.tuples(
                "SELECT owner, CASE WHEN expires_at > :now THEN 1 ELSE 0 END, "
                "CASE WHEN expires_at > :renew THEN 1 ELSE 0 END, "
                "CASE WHEN took_at > :stranded THEN 1 ELSE 0 END FROM controllers",
                params,
            )
            gone = sorted(o for o, alive, _, _ in known if not alive and o != owner)
            ((active,),) = tx.tuples(
                f"SELECT COUNT(*) FROM runs{d.active_runs_hint} WHERE {ACTIVE_RUNS_SQL}"
            )
            # its own runs, those of the controllers gone, and those of none, from the index
            # of the leases: each a row of one id and four flags decided in SQL (kept: 2
            # fresh, 1 past half; free; movable; stranded)
            owners = {"me": owner, **{f"o{i}": o for i, o in enumerate(gone)}}
            flags = (
                "SELECT id, created_at, CASE WHEN lease_owner = :me AND lease_expires_at > :now "
                "THEN CASE WHEN lease_expires_at > :renew THEN 2 ELSE 1 END ELSE 0 END AS k, "
                f"CASE WHEN {_FREE} THEN 1 ELSE 0 END AS f, "
                f"CASE WHEN {moves} THEN 1 ELSE 0 END AS m, "
                f"CASE WHEN {_STRANDED} THEN 1 ELSE 0 END AS s "
                f"FROM runs{d.lease_runs_hint} WHERE {ACTIVE_RUNS_SQL} AND lease_owner"
            )
            rows = tx.tuples(
                f"SELECT id, k, f, m, s FROM ({flags} IN "
                f"({', '.join(':' + k for k in owners)}) UNION ALL {flags} IS NULL) AS u "
                "ORDER BY created_at, id",
                {**params, **providers, **owners},
            )
        others = [taking for o, alive, _, taking in known if alive and o != owner]
        present = any(o == owner and fresh for o, _, fresh, _ in known)
        share = -(-active // (len(others) + 1))  # ceil
        mine = [(rid, kept, movable) for rid, kept, _, movable, _ in rows if kept]
        # the newest of its RUNNING runs go to the others (the oldest stay where they are),
        # while one of them takes runs: given to one that never does, they would be stranded
        surplus = max(0, len(mine) - share) if any(others) else 0
        given = [rid for rid, _, movable in reversed(mine) if movable][:surplus]
        free = [stranded for _, _, f, _, stranded in rows if f]
        take = max(0, share - (len(mine) - len(given)), sum(free)) if free else 0
        held = {rid for rid, kept, _ in mine if kept == 2} - set(given)
        renew = any(kept == 1 for _, kept, _ in mine)
        if present and not given and not renew and not take and not gone:
            return LeaseShare(frozenset(held), active)
        exp = d.ts_in(now + timedelta(seconds=ttl_s))
        with self._db.transaction(write=True) as tx:
            took = ", took_at = excluded.took_at" if take else ""
            tx.run(
                "INSERT INTO controllers (owner, expires_at, took_at) VALUES (:me, :exp, :now) "
                f"ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at{took}",
                {"me": owner, "exp": exp, "now": params["now"]},
            )
            if gone:  # their runs are free (expired with them), and they are forgotten
                names = {f"o{i}": o for i, o in enumerate(gone)}
                listed = ", ".join(":" + k for k in names)
                tx.run(
                    f"UPDATE runs SET lease_owner = NULL WHERE {ACTIVE_RUNS_SQL} AND "
                    f"lease_owner IN ({listed}) AND lease_expires_at <= :now",
                    {**names, "now": params["now"]},
                )
                tx.run(
                    f"DELETE FROM controllers WHERE owner IN ({listed}) AND expires_at <= :now "
                    f"AND NOT EXISTS (SELECT 1 FROM runs WHERE {ACTIVE_RUNS_SQL} AND "
                    "runs.lease_owner = controllers.owner)",
                    {**names, "now": params["now"]},
                )
            # given up: no holder, and free once a look already under way has ended
            grace = d.ts_in(now + timedelta(seconds=ttl_s / 4))
            for i in range(0, len(given), _CHUNK):
                chunk = {f"g{j}": rid for j, rid in enumerate(given[i : i + _CHUNK])}
                tx.run(
                    "UPDATE runs SET lease_owner = NULL, lease_expires_at = :grace "
                    f"WHERE lease_owner = :me AND id IN ({', '.join(':' + k for k in chunk)})",
                    {**chunk, "me": owner, "grace": grace},
                )
            if renew:  # every lease it holds, in one statement: they expire together
                held = {
                    rid
                    for (rid,) in tx.tuples(
                        f"UPDATE runs SET lease_expires_at = :exp WHERE {ACTIVE_RUNS_SQL} AND "
                        "lease_owner = :me AND lease_expires_at > :now RETURNING id",
                        {"me": owner, "exp": exp, "now": params["now"]},
                    )
                }
            if take:
                # up to ``take`` free runs, those stranded first, then the oldest, picked once
                # (a CTE: as a subquery of the UPDATE, PostgreSQL may run it again for each
                # row, past the rows this statement already locked, and take them all); the
                # free condition is checked again on each row as it is written (PostgreSQL
                # re-reads a row another transaction just took, and passes over those
                # another is taking)
                mine_or_none = "(lease_owner IS NULL OR lease_owner = :me)"
                held |= {
                    rid
                    for (rid,) in tx.tuples(
                        f"WITH picked AS (SELECT id FROM runs WHERE {ACTIVE_RUNS_SQL} AND "
                        f"{mine_or_none} AND {_FREE} ORDER BY CASE WHEN {_STRANDED} THEN 0 "
                        f"ELSE 1 END, created_at, id LIMIT :take{d.skip_locked}) "
                        "UPDATE runs SET lease_owner = :me, lease_expires_at = :exp "
                        f"WHERE {ACTIVE_RUNS_SQL} AND {mine_or_none} AND {_FREE} AND id IN "
                        "(SELECT id FROM picked) RETURNING id",
                        {**params, "exp": exp, "take": take},
                    )
                }
        return LeaseShare(frozenset(held), active)

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
                "UPDATE runs SET lease_owner = NULL, lease_expires_at = :now "
                "WHERE lease_owner = :me",
                {"me": owner, "now": self._db.dialect.ts_in(self._now())},
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
