"""Spending caps across runs (``corral budget``) and who launched each run.

A run's owner and project are written with the run (``run_owners``, the same transaction as
the run's row). A cap's spend is read as the billed spans of the attempts it counts
(:meth:`CapOps.cap_spans`); the arithmetic (apportioning a span to a calendar month, what a
stop will add) is the controller's (``corral.control.spend``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from corral.errors import NotFound
from corral.store._core import StoreBase, aware_utc, select_list
from corral.store.records import CAP_COLUMNS, CapRecord

_CAPS = f"SELECT {select_list(CAP_COLUMNS)} FROM spending_caps"
_ONE = "scope = :scope AND subject = :subject"
#: the scopes a cap can have; the team's subject is ''
SCOPES = ("user", "project", "team")
PERIODS = ("month", "total")


@dataclass(frozen=True, slots=True)
class Span:
    """One attempt's billing, as a cap counts it."""

    run_id: str
    attempt: int
    provider: str
    price_per_hour: float
    started_at: datetime
    #: confirmed teardown; None while the machine may still bill
    billed_until: datetime | None
    run_state: str
    #: the run's current attempt (a span of an earlier one is over)
    run_attempt: int
    run_started_at: datetime | None


class CapOps(StoreBase):
    def run_owner(self, run_id: str) -> tuple[str | None, str | None]:
        """(owner, project) of the run; (None, None) when not recorded."""
        with self._db.transaction() as tx:
            row = tx.one("SELECT owner, project FROM run_owners WHERE run_id = :id", {"id": run_id})
        return (None, None) if row is None else (row["owner"], row["project"])

    def set_cap(
        self,
        scope: str,
        subject: str,
        *,
        amount_usd: float,
        warn_at: float,
        period: str,
        set_by: str | None = None,
    ) -> CapRecord:
        """Create or replace the cap of ``scope``/``subject`` (the team: subject '')."""
        now = self._now()
        values: dict[str, Any] = {
            "scope": scope,
            "subject": subject,
            "period": period,
            "amount_usd": float(amount_usd),
            "warn_at": float(warn_at),
            "created_at": now,
            "updated_at": now,
            "set_by": set_by,
        }
        key = {"scope": scope, "subject": subject}
        with self._db.transaction(write=True) as tx:
            if (
                self._insert(
                    tx, "spending_caps", values, unique=("scope", "subject"), returning="scope"
                )
                is None
            ):
                changed = {
                    k: values[k]
                    for k in ("period", "amount_usd", "warn_at", "updated_at", "set_by")
                }
                self._update(tx, "spending_caps", _ONE, key, changed)
            found = self._cap_tx(tx, key)
        assert found is not None
        return found

    def remove_cap(self, scope: str, subject: str) -> CapRecord:
        key = {"scope": scope, "subject": subject}
        with self._db.transaction(write=True) as tx:
            found = self._cap_tx(tx, key)
            if found is None:
                who = "the team" if scope == "team" else f"{scope} {subject!r}"
                raise NotFound(f"no spending cap for {who} (corral budget lists them)")
            tx.run(f"DELETE FROM spending_caps WHERE {_ONE}", key)
        return found

    def _cap_tx(self, tx: Any, key: dict[str, str]) -> CapRecord | None:
        return self._record(tx, "spending_caps", CapRecord, f"{_CAPS} WHERE {_ONE}", key)

    def caps(self) -> list[CapRecord]:
        with self._db.transaction() as tx:
            return self._records(tx, "spending_caps", CapRecord, f"{_CAPS} ORDER BY scope, subject")

    def cap_spans(self, scope: str, subject: str, since: datetime | None) -> list[Span]:
        """The paid attempts a cap of ``scope``/``subject`` counts that billed at or after
        ``since`` (None: all), oldest first."""
        where = ["a.started_at IS NOT NULL", "a.price_per_hour > 0"]
        params: dict[str, Any] = {}
        join = ""
        if scope in ("user", "project"):
            join = "JOIN run_owners o ON o.run_id = a.run_id"
            where.append(f"o.{'owner' if scope == 'user' else 'project'} = :subject")
            params["subject"] = subject
        if since is not None:
            where.append("(a.billed_until IS NULL OR a.billed_until >= :since)")
            params["since"] = self._db.dialect.ts_in(aware_utc(since))
        sql = (
            "SELECT a.run_id, a.number, a.provider, a.price_per_hour, a.started_at, "
            "a.billed_until, a.exit_reason, r.state, r.attempt, r.started_at AS run_started "
            f"FROM attempts a JOIN runs r ON r.id = a.run_id {join} "
            f"WHERE {' AND '.join(where)} ORDER BY a.started_at, a.run_id, a.number"
        )
        out: list[Span] = []
        ts = self._db.dialect.ts_out
        with self._db.transaction() as tx:
            for row in tx.all(sql, params):
                if row["exit_reason"] == "no_capacity":
                    continue
                billed, started = row["billed_until"], ts(row["started_at"])
                assert started is not None  # the query's condition
                out.append(
                    Span(
                        run_id=row["run_id"],
                        attempt=int(row["number"]),
                        provider=row["provider"],
                        price_per_hour=float(row["price_per_hour"]),
                        started_at=started,
                        billed_until=ts(billed) if billed is not None else None,
                        run_state=row["state"],
                        run_attempt=int(row["attempt"]),
                        run_started_at=(
                            ts(row["run_started"]) if row["run_started"] is not None else None
                        ),
                    )
                )
        return out
