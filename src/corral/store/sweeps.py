"""Hyperparameter sweeps (``corral sweep``) and their trials.

A trial is started at most once however many controllers drive the sweep: its row's key
(sweep, number) is unique and its run is created in the same transaction
(:meth:`SweepOps.start_trial`); a controller that loses the race starts nothing.
"""

from __future__ import annotations

from typing import Any

from corral.errors import Conflict, NotFound, StoreError
from corral.store._core import StoreBase, select_list
from corral.store.records import SWEEP_COLUMNS, TRIAL_COLUMNS, SweepRecord, TrialRecord

_SWEEPS = f"SELECT {select_list(SWEEP_COLUMNS)} FROM sweeps"
_TRIALS = f"SELECT {select_list(TRIAL_COLUMNS)} FROM sweep_trials"
#: a sweep in these states still starts or watches trials
ACTIVE_SWEEP_STATES = ("RUNNING", "STOPPING")


class SweepOps(StoreBase):
    def add_sweep(
        self,
        *,
        name: str,
        sweep: dict[str, Any],
        job: dict[str, Any],
        spec_path: str,
        owner: str | None,
    ) -> SweepRecord:
        """A new RUNNING sweep; Conflict when one of that name exists."""
        now = self._now()
        values = {
            "name": name,
            "state": "RUNNING",
            "reason": "launched",
            "spec_path": spec_path,
            "owner": owner,
            "best_trial": None,
            "created_at": now,
            "updated_at": now,
            "finished_at": None,
            "sweep": sweep,
            "job": job,
        }
        with self._db.transaction(write=True) as tx:
            if self._insert(tx, "sweeps", values, unique=("name",), returning="name") is None:
                raise Conflict(
                    f"a sweep named {name!r} exists: give this one another name (--set name=...)",
                    fields={"sweep": name},
                )
            return self._sweep_tx(tx, name)

    def get_sweep(self, name: str) -> SweepRecord:
        with self._db.transaction() as tx:
            return self._sweep_tx(tx, name)

    def sweeps(self, *, active_only: bool = False) -> list[SweepRecord]:
        sql = _SWEEPS
        if active_only:
            sql += " WHERE state IN ('RUNNING', 'STOPPING')"
        with self._db.transaction() as tx:
            return self._records(tx, "sweeps", SweepRecord, f"{sql} ORDER BY created_at, name")

    def update_sweep(
        self, name: str, *, expect: tuple[str, ...] | None = None, **fields: Any
    ) -> SweepRecord | None:
        """Set ``fields``; with ``expect``, only if the state is one of those (None if not)."""
        fields["updated_at"] = self._now()
        where, key = "name = :name", {"name": name}
        if expect:
            where += " AND state IN (" + ", ".join(f"'{s}'" for s in expect) + ")"
        with self._db.transaction(write=True) as tx:
            if self._update(tx, "sweeps", where, key, fields) == 0:
                self._sweep_tx(tx, name)  # NotFound when there is no such sweep
                return None
            return self._sweep_tx(tx, name)

    def trials(self, sweep: str) -> list[TrialRecord]:
        with self._db.transaction() as tx:
            return self._records(
                tx,
                "sweep_trials",
                TrialRecord,
                f"{_TRIALS} WHERE sweep = :sweep ORDER BY number",
                {"sweep": sweep},
            )

    def start_trial(
        self,
        sweep: str,
        number: int,
        *,
        params: dict[str, Any],
        spec: dict[str, Any],
        spec_hash: str,
        spec_path: str,
        workdir: str,
        owner: str | None,
        project: str | None,
    ) -> str | None:
        """Create trial ``number`` and its PENDING run in one transaction; the run's id, or
        None when another controller created that trial first."""
        now = self._now()
        row = {
            "sweep": sweep,
            "number": int(number),
            "run_id": "",
            "state": "running",
            "params": params,
            "value": None,
            "step": None,
            "intermediate": {},
            "events_cursor": 0,
            "cost_usd": 0.0,
            "created_at": now,
            "updated_at": now,
        }
        key = {"sweep": sweep, "number": int(number)}
        with self._db.transaction(write=True) as tx:
            # the trial's row first: its unique key is what a second controller loses on
            if (
                self._insert(tx, "sweep_trials", row, unique=("sweep", "number"), returning="sweep")
                is None
            ):
                return None
            for _ in range(16):
                run_id = self._insert_run(
                    tx,
                    name=str(spec.get("name") or sweep),
                    spec=spec,
                    spec_hash=spec_hash,
                    spec_path=spec_path,
                    workdir=workdir,
                    now=now,
                    reason=f"sweep {sweep}: trial {number}",
                    owner=owner,
                    project=project,
                )
                if run_id is not None:
                    break
            else:
                raise StoreError("could not find a free run id")
            where = "sweep = :sweep AND number = :number"
            self._update(tx, "sweep_trials", where, key, {"run_id": run_id})
            self._insert_event(
                tx,
                run_id,
                "sweep.trial",
                f"trial {number} of sweep {sweep}",
                data={"sweep": sweep, "trial": number, "params": params},
                ts=now,
            )
            return run_id

    def update_trial(self, sweep: str, number: int, **fields: Any) -> None:
        fields["updated_at"] = self._now()
        with self._db.transaction(write=True) as tx:
            self._update(
                tx,
                "sweep_trials",
                "sweep = :sweep AND number = :number",
                {"sweep": sweep, "number": int(number)},
                fields,
            )

    def _sweep_tx(self, tx: Any, name: str) -> SweepRecord:
        found = self._record(
            tx, "sweeps", SweepRecord, f"{_SWEEPS} WHERE name = :name", {"name": name}
        )
        if found is None:
            raise NotFound(f"no sweep named {name!r} (corral sweep ls lists them)")
        return found
