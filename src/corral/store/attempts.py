"""Attempts: one per machine a run was launched on (a preemption starts a new one).

Money rule: an attempt's cost is ``price_per_hour x (billed_until - started_at)``, and the
run's ``cost_usd`` is the sum over its attempts. ``update_attempt`` keeps both true: setting
``billed_until`` (or the price or start) recomputes the attempt's cost, and any change of an
attempt's cost rewrites the run's total in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from corral.errors import Conflict, NotFound
from corral.store._core import StoreBase, aware_utc, select_list, sql_count
from corral.store.db import Tx
from corral.store.records import ATTEMPT_COLUMNS, AttemptRecord, EventRecord

_SELECT = select_list(ATTEMPT_COLUMNS)
_WHERE = "run_id = :run_id AND number = :number"
_COST_INPUTS = {"billed_until", "price_per_hour", "started_at"}


class AttemptOps(StoreBase):
    def create_attempt(
        self,
        run_id: str,
        number: int,
        *,
        provider: str,
        offer: Mapping[str, Any],
        price_per_hour: float,
        state: str = "PROVISIONING",
        started_at: datetime | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> AttemptRecord:
        """Attempt ``number`` of a run, billed from ``started_at`` (default: now).
        Conflict if the run already has an attempt with this number."""
        values = {
            **dict.fromkeys(ATTEMPT_COLUMNS),
            "run_id": run_id,
            "number": int(number),
            "provider": provider,
            "offer": dict(offer),
            "state": str(state),
            "price_per_hour": float(price_per_hour),
            "started_at": started_at or self._now(),
            "cost_usd": 0.0,
            "events_cursor": 0,
            "log_offsets": {},
            "data": dict(data or {}),
        }
        del values["id"]
        with self._db.transaction(write=True) as tx:
            self._run_exists(tx, run_id)
            if self._insert(tx, "attempts", values, unique=("run_id", "number")) is None:
                raise Conflict(f"run {run_id} already has attempt {number}")
            return self._get_attempt_tx(tx, run_id, number)

    def update_attempt(self, run_id: str, number: int, **fields: Any) -> AttemptRecord:
        """Set attempt columns; keeps the attempt's and the run's cost in step (see module)."""
        self._check_fields("attempts", fields, {"id", "run_id", "number"})
        key = {"run_id": run_id, "number": int(number)}
        with self._db.transaction(write=bool(fields)) as tx:
            current = self._get_attempt_tx(tx, run_id, number, lock=True)
            values = dict(fields)
            if "cost_usd" not in values and _COST_INPUTS.intersection(values):
                price = values.get("price_per_hour", current.price_per_hour)
                cost = _cost(price, current.started_at, current.billed_until, values)
                if cost is not None:
                    values["cost_usd"] = cost
            self._update(tx, "attempts", _WHERE, key, values)
            if "cost_usd" in values:
                self._sync_run_cost(tx, run_id)
            return self._get_attempt_tx(tx, run_id, number)

    def get_attempt(self, run_id: str, number: int) -> AttemptRecord:
        with self._db.transaction() as tx:
            return self._get_attempt_tx(tx, run_id, number)

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        """The run's attempts by number (empty for an unknown run)."""
        with self._db.transaction() as tx:
            return self._records(
                tx,
                "attempts",
                AttemptRecord,
                f"SELECT {_SELECT} FROM attempts WHERE run_id = :run_id ORDER BY number",
                {"run_id": run_id},
            )

    def recent_attempts(self, provider: str, limit: int = 200) -> list[AttemptRecord]:
        """The provider's last ``limit`` attempts that ran and ended, newest first, whatever
        the run (what its interruption rate is observed from)."""
        with self._db.transaction() as tx:
            return self._records(
                tx,
                "attempts",
                AttemptRecord,
                f"SELECT {_SELECT} FROM attempts WHERE provider = :provider "
                "AND running_at IS NOT NULL AND ended_at IS NOT NULL "
                "ORDER BY id DESC LIMIT :limit",
                {"provider": provider, "limit": sql_count(limit)},
            )

    def append_agent_events(
        self, run_id: str, number: int, events: Sequence[Mapping[str, Any]], *, cursor: int
    ) -> list[EventRecord]:
        """Copy events read from the attempt's agent into ``events`` and advance the attempt's
        ``events_cursor`` to ``cursor``, in one transaction, so a crash or a second controller
        never copies an event twice. If the cursor is already at or past ``cursor`` nothing
        is written and ``[]`` is returned. Each event: ``type``, optional ``reason``,
        ``data``, ``ts`` (an aware datetime; default now)."""
        key = {"run_id": run_id, "number": int(number)}
        with self._db.transaction(write=True) as tx:
            current = self._get_attempt_tx(tx, run_id, number, lock=True)
            if current.events_cursor >= cursor:
                return []
            out = []
            for ev in events:
                ts = ev.get("ts")
                out.append(
                    self._insert_event(
                        tx,
                        run_id,
                        str(ev["type"]),
                        str(ev.get("reason") or ""),
                        data=ev.get("data") or {},
                        attempt=int(number),
                        ts=aware_utc(ts) if isinstance(ts, datetime) else None,
                    )
                )
            self._update(tx, "attempts", _WHERE, key, {"events_cursor": int(cursor)})
            return out

    def _get_attempt_tx(
        self, tx: Tx, run_id: str, number: int, lock: bool = False
    ) -> AttemptRecord:
        suffix = self._db.dialect.for_update if lock else ""
        found = self._record(
            tx,
            "attempts",
            AttemptRecord,
            f"SELECT {_SELECT} FROM attempts WHERE {_WHERE}{suffix}",
            {"run_id": run_id, "number": int(number)},
        )
        if found is None:
            raise NotFound(f"run {run_id!r} has no attempt {number}")
        return found

    def _sync_run_cost(self, tx: Tx, run_id: str) -> None:
        tx.run(
            "UPDATE runs SET cost_usd = (SELECT COALESCE(SUM(cost_usd), 0) FROM attempts "
            "WHERE run_id = :run_id), updated_at = :now WHERE id = :run_id",
            {"run_id": run_id, "now": self._db.dialect.ts_in(self._now())},
        )


def _cost(
    price: float,
    started_at: datetime | None,
    billed_until: datetime | None,
    new: Mapping[str, Any],
) -> float | None:
    start = new.get("started_at", started_at)
    until = new.get("billed_until", billed_until)
    if start is None or until is None:
        return None
    hours = max(0.0, (aware_utc(until) - aware_utc(start)).total_seconds()) / 3600.0
    return float(price) * hours
