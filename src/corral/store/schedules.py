"""Cron schedules (``corral schedule add``) and the ticks they acted on.

A tick starts at most one run however many controllers share the database: the run is created
in the same transaction as the tick's row, whose key (schedule, tick time) is unique, and the
schedule's ``next_at`` moves forward with a compare-and-set. A controller that loses either
race starts nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from corral.errors import Conflict, NotFound, StoreError
from corral.store._core import StoreBase, aware_utc, select_list, sql_count
from corral.store.records import (
    SCHEDULE_COLUMNS,
    SCHEDULE_TICK_COLUMNS,
    ScheduleRecord,
    ScheduleTickRecord,
)

_SCHEDULES = f"SELECT {select_list(SCHEDULE_COLUMNS)} FROM schedules"
_TICKS = f"SELECT {select_list(SCHEDULE_TICK_COLUMNS)} FROM schedule_ticks"


class ScheduleOps(StoreBase):
    def add_schedule(
        self,
        *,
        name: str,
        cron: str,
        timezone: str,
        missed: str,
        spec: dict[str, Any],
        spec_hash: str,
        spec_path: str,
        workdir: str,
        next_at: datetime,
        replace: bool = False,
    ) -> ScheduleRecord:
        """Register a schedule under ``name``; Conflict if one exists (unless ``replace``:
        then its spec and cron change, its history stays)."""
        now = self._now()
        values = {
            "name": name,
            "cron": cron,
            "timezone": timezone,
            "missed": missed,
            "spec_hash": spec_hash,
            "spec_path": str(spec_path),
            "workdir": str(workdir),
            "created_at": now,
            "updated_at": now,
            "next_at": aware_utc(next_at),
            "last_tick_at": None,
            "last_run_id": None,
            "fired": 0,
            "skipped": 0,
            "spec": spec,
        }
        with self._db.transaction(write=True) as tx:
            if self._insert(tx, "schedules", values, unique=("name",), returning="name"):
                return self._schedule_tx(tx, name)
            if not replace:
                raise Conflict(
                    f"a schedule named {name!r} exists: `corral schedule rm {name}` first, "
                    "or add it with --replace",
                    fields={"schedule": name},
                )
            keep = ("name", "created_at", "last_tick_at", "last_run_id", "fired", "skipped")
            changed = {k: v for k, v in values.items() if k not in keep}
            self._update(tx, "schedules", "name = :name", {"name": name}, changed)
            return self._schedule_tx(tx, name)

    def schedules(self) -> list[ScheduleRecord]:
        with self._db.transaction() as tx:
            return self._records(tx, "schedules", ScheduleRecord, f"{_SCHEDULES} ORDER BY name")

    def count_schedules(self) -> int:
        with self._db.transaction() as tx:
            row = tx.one("SELECT COUNT(*) AS n FROM schedules")
        return int(row["n"]) if row else 0

    def get_schedule(self, name: str) -> ScheduleRecord:
        with self._db.transaction() as tx:
            return self._schedule_tx(tx, name)

    def remove_schedule(self, name: str) -> ScheduleRecord:
        """Delete the schedule (and its ticks; the runs it started stay). NotFound if none."""
        with self._db.transaction(write=True) as tx:
            found = self._schedule_tx(tx, name)
            tx.run("DELETE FROM schedule_ticks WHERE schedule = :name", {"name": name})
            tx.run("DELETE FROM schedules WHERE name = :name", {"name": name})
            return found

    def due_schedules(self, now: datetime) -> list[ScheduleRecord]:
        """Schedules whose next tick is at or before ``now``."""
        with self._db.transaction() as tx:
            return self._records(
                tx,
                "schedules",
                ScheduleRecord,
                f"{_SCHEDULES} WHERE next_at <= :now ORDER BY next_at",
                {"now": self._db.dialect.ts_in(aware_utc(now))},
            )

    def schedule_ticks(self, name: str, limit: int | None = None) -> list[ScheduleTickRecord]:
        """The ticks the schedule acted on, oldest first (the newest ``limit``)."""
        sql = f"{_TICKS} WHERE schedule = :name ORDER BY tick_at DESC"
        params: dict[str, Any] = {"name": name}
        if limit is not None:
            sql += " LIMIT :limit"
            params["limit"] = sql_count(limit)
        with self._db.transaction() as tx:
            found = self._records(tx, "schedule_ticks", ScheduleTickRecord, sql, params)
        return list(reversed(found))

    def fire_schedule(
        self,
        name: str,
        *,
        expect_next: datetime,
        next_at: datetime,
        tick_at: datetime,
        start_run: bool,
        missed: int,
    ) -> ScheduleTickRecord | None:
        """Act on the tick ``tick_at`` of a schedule whose ``next_at`` is ``expect_next``: with
        ``start_run``, create its run (PENDING, from the schedule's spec); move ``next_at`` to
        ``next_at``; count ``missed`` ticks skipped. One transaction; None (nothing done) if
        another controller acted first or the schedule is gone."""
        now = self._now()
        with self._db.transaction(write=True) as tx:
            lock = self._db.dialect.for_update
            row = tx.one(f"SELECT next_at FROM schedules WHERE name = :name{lock}", {"name": name})
            if row is None:
                return None
            if self._db.dialect.ts_out(row["next_at"]) != aware_utc(expect_next):
                return None  # another controller moved it on
            tick: dict[str, Any] = {
                "schedule": name,
                "tick_at": aware_utc(tick_at),
                "run_id": None,
                "missed": int(missed),
                "fired_at": now,
            }
            if (
                self._insert(
                    tx, "schedule_ticks", tick, unique=("schedule", "tick_at"), returning="schedule"
                )
                is None
            ):
                return None
            run_id = None
            if start_run:
                sched = self._schedule_tx(tx, name)
                for _ in range(16):
                    run_id = self._insert_run(
                        tx,
                        name=str(sched.spec.get("name") or name),
                        spec=sched.spec,
                        spec_hash=sched.spec_hash,
                        spec_path=sched.spec_path,
                        workdir=sched.workdir,
                        now=now,
                        reason=f"scheduled: {name} at {aware_utc(tick_at).isoformat()}",
                        project=sched.spec.get("project") or None,
                    )
                    if run_id is not None:
                        break
                if run_id is None:
                    raise StoreError("could not find a free run id")
                tx.run(
                    "UPDATE schedule_ticks SET run_id = :run WHERE schedule = :name "
                    "AND tick_at = :tick",
                    {"run": run_id, "name": name, "tick": self._db.dialect.ts_in(tick["tick_at"])},
                )
                self._insert_event(
                    tx,
                    run_id,
                    "schedule.fired",
                    f"started by schedule {name} for its tick at {tick['tick_at'].isoformat()}",
                    data={
                        "schedule": name,
                        "tick_at": tick["tick_at"].isoformat(),
                        "missed": missed,
                    },
                    ts=now,
                )
            values: dict[str, Any] = {
                "next_at": aware_utc(next_at),
                "updated_at": now,
                "last_tick_at": tick["tick_at"],
            }
            fired = tx.one(
                "SELECT fired, skipped FROM schedules WHERE name = :name", {"name": name}
            )
            assert fired is not None
            values["fired"] = int(fired["fired"]) + (1 if run_id else 0)
            values["skipped"] = int(fired["skipped"]) + int(missed) + (0 if run_id else 1)
            if run_id:
                values["last_run_id"] = run_id
            self._update(tx, "schedules", "name = :name", {"name": name}, values)
            return ScheduleTickRecord(
                schedule=name,
                tick_at=tick["tick_at"],
                run_id=run_id,
                missed=int(missed),
                fired_at=now,
            )

    def _schedule_tx(self, tx: Any, name: str) -> ScheduleRecord:
        found = self._record(
            tx, "schedules", ScheduleRecord, f"{_SCHEDULES} WHERE name = :name", {"name": name}
        )
        if found is None:
            raise NotFound(f"no schedule named {name!r} (corral schedule ls lists them)")
        return found
