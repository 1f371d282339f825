"""What every part of the Store shares: the database, the clock, row <-> record conversion."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from corral.errors import NotFound, StoreError
from corral.store.db import Database, Tx
from corral.store.records import COLUMNS, JSONS, RUN_COLUMNS, TIMESTAMPS, EventRecord
from corral.store.states import RunState

Clock = Callable[[], datetime]
R = TypeVar("R")


#: the largest integer SQLite and PostgreSQL (bigint) hold
SQL_INT_MAX = 2**63 - 1


def sql_count(value: int) -> int:
    """A LIMIT (or an id bound) as the database can take it: at least 0, at most
    :data:`SQL_INT_MAX` (a larger one means "all": no table holds more rows)."""
    return min(max(0, int(value)), SQL_INT_MAX)


def utc_now() -> datetime:
    return datetime.now(UTC)


def aware_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (a naive one is taken to be UTC already)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class StoreBase:
    def __init__(self, db: Database, clock: Clock | None = None):
        self._db = db
        self._clock = clock or utc_now
        self._conv_cache: dict[str, tuple[Callable[[Any], Any] | None, ...]] = {}
        #: the spec ``priority`` of the runs waiting for capacity, read once each (a run's
        #: spec never changes): ``Store.run_heads`` reads no spec on its every call
        self._priorities: dict[str, int] = {}

    def _now(self) -> datetime:
        return aware_utc(self._clock())

    # --- conversion --------------------------------------------------------------------------

    def _encode(self, table: str, values: Mapping[str, Any]) -> dict[str, Any]:
        d = self._db.dialect
        out = dict(values)
        for col in TIMESTAMPS[table].intersection(out):
            out[col] = d.ts_in(out[col])
        for col in JSONS[table].intersection(out):
            out[col] = d.json_in(out[col])
        return out

    def _records(
        self, tx: Tx, table: str, cls: type[R], sql: str, params: dict[str, Any] | None = None
    ) -> list[R]:
        """Run ``sql``, which selects ``COLUMNS[table]`` in order, and build records."""
        convs = self._converters(table)
        return [
            cls(*[v if f is None or v is None else f(v) for f, v in zip(convs, row, strict=True)])
            for row in tx.tuples(sql, params)
        ]

    def _record(
        self, tx: Tx, table: str, cls: type[R], sql: str, params: dict[str, Any] | None = None
    ) -> R | None:
        found = self._records(tx, table, cls, sql, params)
        return found[0] if found else None

    def _converters(self, table: str) -> tuple[Callable[[Any], Any] | None, ...]:
        convs = self._conv_cache.get(table)
        if convs is None:
            d = self._db.dialect
            convs = tuple(
                d.ts_out if c in TIMESTAMPS[table] else d.json_out if c in JSONS[table] else None
                for c in COLUMNS[table]
            )
            self._conv_cache[table] = convs
        return convs

    # --- SQL helpers -------------------------------------------------------------------------

    @staticmethod
    def _check_fields(table: str, fields: Iterable[str], fixed: set[str]) -> None:
        bad = sorted(set(fields) - (set(COLUMNS[table]) - fixed))
        if bad:
            raise StoreError(f"cannot set {', '.join(bad)} on {table} this way")

    def _insert(
        self,
        tx: Tx,
        table: str,
        values: Mapping[str, Any],
        *,
        unique: tuple[str, ...] = (),
        returning: str = "id",
    ) -> Any:
        """Insert one row and return its ``returning`` column. With ``unique`` (the columns of
        a unique constraint), a row that already exists is left alone and None is returned."""
        cols = list(values)
        sql = (
            f"INSERT INTO {table} ({', '.join(_q(c) for c in cols)}) "
            f"VALUES ({', '.join(':' + c for c in cols)})"
        )
        if unique:
            sql += f" ON CONFLICT ({', '.join(_q(c) for c in unique)}) DO NOTHING"
        row = tx.one(f"{sql} RETURNING {_q(returning)}", self._encode(table, values))
        return None if row is None else row[returning]

    def _update(self, tx: Tx, table: str, where: str, key: dict[str, Any], values: Mapping) -> int:
        if not values:
            return 0
        sets = ", ".join(f"{_q(c)} = :v_{c}" for c in values)
        params = {f"v_{c}": v for c, v in self._encode(table, values).items()}
        return tx.run(f"UPDATE {table} SET {sets} WHERE {where}", {**params, **key})

    def _insert_run(
        self,
        tx: Tx,
        *,
        name: str,
        spec: dict[str, Any],
        spec_hash: str,
        spec_path: str,
        workdir: str,
        now: datetime,
        run_id: str | None = None,
        reason: str = "submitted",
        owner: str | None = None,
        project: str | None = None,
    ) -> str | None:
        """Insert a PENDING run (id ``<name>-<6 hex>`` unless ``run_id``) and its ``run.state``
        event; returns its id, or None when the id is taken (the caller tries again)."""
        rid = run_id or f"{_slug(name)}-{os.urandom(3).hex()}"
        values: dict[str, Any] = {
            **dict.fromkeys(RUN_COLUMNS),
            "id": rid,
            "name": name,
            "state": RunState.PENDING.value,
            "reason": reason,
            "spec": spec,
            "spec_hash": spec_hash,
            "spec_path": str(spec_path),
            "workdir": str(workdir),
            "attempt": 0,
            "cost_usd": 0.0,
            "completed_stages": [],
            "created_at": now,
            "updated_at": now,
        }
        if self._insert(tx, "runs", values, unique=("id",)) is None:
            return None
        if owner is not None or project is not None:  # who launched it: what caps count
            self._insert(
                tx,
                "run_owners",
                {"run_id": rid, "owner": owner, "project": project},
                unique=("run_id",),
                returning="run_id",
            )
        data = {"from": None, "to": RunState.PENDING.value}
        self._insert_event(tx, rid, "run.state", reason, data=data, ts=now)
        return rid

    def _run_exists(self, tx: Tx, run_id: str) -> None:
        if tx.one("SELECT 1 AS x FROM runs WHERE id = :id", {"id": run_id}) is None:
            raise NotFound(f"no run with id {run_id!r}")

    def _insert_event(
        self,
        tx: Tx,
        run_id: str,
        type: str,
        reason: str = "",
        *,
        data: Mapping[str, Any] | None = None,
        attempt: int | None = None,
        ts: datetime | None = None,
    ) -> EventRecord:
        from corral.secrets.redact import current_redactor

        redactor = current_redactor()  # no secret value is ever written into an event
        values = {
            "run_id": run_id,
            "attempt": attempt,
            "ts": aware_utc(ts) if ts else self._now(),
            "type": type,
            "reason": redactor.redact(reason or ""),
            "data": redactor.redact_data(dict(data or {})),
        }
        self._db.dialect.lock_events(tx.cur)
        event_id = self._insert(tx, "events", values)
        return EventRecord(id=int(event_id), **values)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


def _q(col: str) -> str:
    return f'"{col}"'


def select_list(columns: Iterable[str]) -> str:
    return ", ".join(_q(c) for c in columns)
