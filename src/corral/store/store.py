"""The Store: runs and their events. Attempts and the resource intent log live in mixins.

Every method is one short transaction and returns plain frozen records (``records.py``);
callers never see a connection or a session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from corral.errors import BadInput, Conflict, NotFound, StoreError
from corral.store._core import Clock, select_list, sql_count
from corral.store.attempts import AttemptOps
from corral.store.caps import CapOps
from corral.store.db import Database
from corral.store.gpu_history import GpuHistoryOps
from corral.store.leases import LeaseOps
from corral.store.migrate import ensure_schema
from corral.store.records import EVENT_COLUMNS, RUN_COLUMNS, EventRecord, RunRecord
from corral.store.resources import ResourceOps
from corral.store.schedules import ScheduleOps
from corral.store.states import (
    ACTIONS,
    ACTIVE_RUNS_SQL,
    ACTIVE_STATES,
    RUN_STATES,
    TERMINAL_STATES,
    RunState,
)
from corral.store.stats import StatsOps
from corral.store.sweeps import SweepOps
from corral.store.urls import parse_url
from corral.store.webhooks import WebhookOps

_RUNS = f"SELECT {select_list(RUN_COLUMNS)} FROM runs"
#: The spec can be large: listing selects NULL in its place (RunRecord.spec is None).
_RUNS_NO_SPEC = (
    "SELECT " + select_list(RUN_COLUMNS).replace('"spec"', 'NULL AS "spec"', 1) + " FROM runs"
)
_NEWEST_FIRST = "ORDER BY created_at DESC, id DESC"
_WAITING = frozenset({RunState.PENDING.value, RunState.RECOVERING.value})
#: ids one statement names at most (SQLite builds before 3.32 take 999 parameters)
_CHUNK = 500
#: the unfinished runs: the condition of the partial index ``ix_runs_active``, word for word
_ACTIVE_WHERE = f"WHERE {ACTIVE_RUNS_SQL}"
_EVENT_SELECT = select_list(EVENT_COLUMNS)
_FIXED_RUN_FIELDS = {"id", "state", "created_at", "updated_at"}
_AMBIGUOUS_SHOWN = 10


class Store(
    AttemptOps,
    ResourceOps,
    WebhookOps,
    StatsOps,
    ScheduleOps,
    LeaseOps,
    CapOps,
    SweepOps,
    GpuHistoryOps,
):
    """corral's database. Open with :meth:`Store.open`; safe to share between threads."""

    @classmethod
    def open(
        cls, url: str | None = None, *, clock: Clock | None = None, connections: int = 4
    ) -> Store:
        """Open the database (``url``, else ``CORRAL_DATABASE_URL``, else SQLite under
        ``CORRAL_HOME``) and bring its schema to head if it is behind. ``connections``: idle
        connections kept for reuse (a process with many threads on the store wants more)."""
        db = Database(parse_url(url), max_idle=connections)
        try:
            ensure_schema(db)
        except BaseException:
            db.close()
            raise
        return cls(db, clock)

    @property
    def url(self) -> str:
        """The database URL with any password masked."""
        return self._db.url.masked

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.dialect.name

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- runs ----------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        name: str,
        spec: dict[str, Any],
        spec_hash: str,
        spec_path: str,
        workdir: str,
        run_id: str | None = None,
        owner: str | None = None,
        project: str | None = None,
    ) -> RunRecord:
        """A new PENDING run (id: ``<name>-<6 hex>`` unless ``run_id`` is given), with its
        ``run.state`` event (None -> PENDING, reason ``submitted``); ``owner`` (who launched
        it) and ``project`` (its spec's label) are what spending caps count."""
        if not name:
            raise BadInput("a run needs a name")
        now = self._now()
        for _ in range(16):
            with self._db.transaction(write=True) as tx:
                rid = self._insert_run(
                    tx,
                    name=name,
                    spec=spec,
                    spec_hash=spec_hash,
                    spec_path=spec_path,
                    workdir=workdir,
                    now=now,
                    run_id=run_id,
                    owner=owner,
                    project=project,
                )
                if rid is not None:
                    return self._get_run_tx(tx, rid)
            if run_id:
                raise Conflict(f"a run with id {run_id!r} already exists")
        raise StoreError("could not find a free run id")  # 16 collisions of 24 random bits

    def get_run(self, ref: str, *, with_spec: bool = True) -> RunRecord:
        """The run named by ``ref``: an exact id, else a unique id prefix, else the newest run
        with that name. An ambiguous prefix that is no run's name raises Conflict listing the
        candidates; no match raises NotFound. (A name wins over an ambiguous prefix because
        every id starts with its run's name.) ``with_spec=False``: an exact id is read
        without its spec (``RunRecord.spec`` None), as a loop that looks at it often wants."""
        if not ref:
            raise NotFound("no run matches an empty reference")
        with self._db.transaction() as tx:
            select = _RUNS if with_spec else _RUNS_NO_SPEC
            found = self._record(tx, "runs", RunRecord, f"{select} WHERE id = :ref", {"ref": ref})
            if found is not None:
                return found
            rows = self._records(
                tx,
                "runs",
                RunRecord,
                f"{_RUNS_NO_SPEC} WHERE substr(id, 1, :n) = :ref {_NEWEST_FIRST}",
                {"ref": ref, "n": len(ref)},
            )
            if len(rows) == 1:
                return self._get_run_tx(tx, rows[0].id)
            found = self._record(
                tx,
                "runs",
                RunRecord,
                f"{_RUNS} WHERE name = :ref {_NEWEST_FIRST} LIMIT 1",
                {"ref": ref},
            )
            if found is not None:
                return found
        if rows:
            ids = [r.id for r in rows[:_AMBIGUOUS_SHOWN]]
            more = f" and {len(rows) - len(ids)} more" if len(rows) > len(ids) else ""
            raise Conflict(
                f"{ref!r} matches {len(rows)} runs: {', '.join(ids)}{more}; give more of the id",
                fields={"candidates": [r.id for r in rows]},
            )
        raise NotFound(f"no run matches {ref!r} (by id, id prefix or name)")

    def list_runs(
        self,
        *,
        states: Iterable[str] | None = None,
        limit: int | None = None,
        active_only: bool = False,
        with_spec: bool = False,
        before: RunRecord | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first. Without ``with_spec`` the (possibly large) spec is not loaded
        and ``RunRecord.spec`` is None. ``before``: only runs listed after that one (older;
        the next page, read from the index however deep it is)."""
        found = _runs_filter(states, active_only)
        if found is None:
            return []
        where, params = found
        base = _RUNS if with_spec else _RUNS_NO_SPEC
        if where == _ACTIVE_WHERE:  # read from the partial index of the unfinished runs
            base += self._db.dialect.active_runs_hint
        if before is not None:
            older = "(created_at < :before_at OR (created_at = :before_at AND id < :before_id))"
            where = f"{where} AND {older}" if where else f"WHERE {older}"
            params["before_at"] = self._db.dialect.ts_in(before.created_at)
            params["before_id"] = before.id
        sql = f"{base} {where} {_NEWEST_FIRST}"
        if limit is not None:
            sql += " LIMIT :limit"
            params["limit"] = sql_count(limit)
        with self._db.transaction() as tx:
            return self._records(tx, "runs", RunRecord, sql, params)

    def runs_of_spec(self, spec_hash: str, *, limit: int) -> list[RunRecord]:
        """The newest ``limit`` runs made from the spec with ``spec_hash`` (any state, newest
        first; ``RunRecord.spec`` is None)."""
        sql = f"{_RUNS_NO_SPEC} WHERE spec_hash = :spec_hash {_NEWEST_FIRST} LIMIT :limit"
        params = {"spec_hash": spec_hash, "limit": sql_count(limit)}
        with self._db.transaction() as tx:
            return self._records(tx, "runs", RunRecord, sql, params)

    def run_heads(self, owner: str | None = None) -> list[tuple[str, str, str | None]]:
        """``(id, state, requested_action)`` of every active run, oldest first, the runs
        waiting for capacity (PENDING, RECOVERING) by their ``priority`` first, highest
        first: what the controller's loop reads every tick. Read from the partial index of
        the unfinished runs alone (it holds these columns, in this order: no table row and
        no sort of ten thousand runs), no timestamp converted; the priority of a waiting run
        is read from its spec once, when first seen waiting (kept while it waits).

        ``owner``: only the runs whose lease it holds and those nobody holds (new, given
        up, released, or a gone controller's), from the index of the runs by lease holder
        (two ranges of it: a controller sharing the store with K-1 others reads about 1/K
        of the active runs)."""
        d = self._db.dialect
        params = None
        if owner is None:
            sql = (
                f"SELECT id, state, requested_action FROM runs{d.active_runs_hint} "
                f"{_ACTIVE_WHERE} ORDER BY created_at, id"
            )
        else:
            part = (
                f"SELECT id, state, requested_action, created_at FROM runs{d.lease_runs_hint} "
                f"{_ACTIVE_WHERE} AND lease_owner"
            )
            sql = (
                f"SELECT id, state, requested_action FROM ({part} = :me UNION ALL {part} "
                "IS NULL) AS u ORDER BY created_at, id"
            )
            params = {"me": owner}
        with self._db.transaction() as tx:
            rows: list[tuple[str, str, str | None]] = tx.tuples(sql, params)
            waiting = [rid for rid, state, _ in rows if state in _WAITING]
            known = self._priorities
            new = [rid for rid in waiting if rid not in known]
            found: dict[str, int] = {}
            for i in range(0, len(new), _CHUNK):
                ids = {f"i{j}": rid for j, rid in enumerate(new[i : i + _CHUNK])}
                found.update(
                    tx.tuples(
                        f"SELECT id, {self._db.dialect.run_priority} FROM runs "
                        f"WHERE id IN ({', '.join(':' + k for k in ids)})",
                        ids,
                    )
                )
        # only the runs still waiting are kept (one assignment: threads may read it)
        self._priorities = priority = {
            rid: int(known.get(rid, found.get(rid, 5))) for rid in waiting
        }
        if any(p != 5 for p in priority.values()):  # stable: oldest first within a priority
            rows.sort(key=lambda r: -priority.get(r[0], 5))
        return rows

    def count_runs(self, *, states: Iterable[str] | None = None, active_only: bool = False) -> int:
        """How many runs :meth:`list_runs` with the same filters lists without a limit."""
        found = _runs_filter(states, active_only)
        if found is None:
            return 0
        where, params = found
        with self._db.transaction() as tx:
            row = tx.one(f"SELECT COUNT(*) AS n FROM runs {where}", params)
        return int(row["n"]) if row else 0

    def transition(
        self,
        run_id: str,
        to_state: str,
        reason: str,
        *,
        expect: Iterable[str] | None = None,
        data: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> RunRecord:
        """Move a run to ``to_state`` and write its ``run.state`` event, in one transaction.

        Compare-and-set: with ``expect``, a run whose current state is not in it raises
        Conflict and nothing changes. A terminal run never changes state (Conflict).
        Sets ``updated_at``; ``started_at`` on the first RUNNING; ``finished_at`` on a terminal
        state. ``fields`` sets other run columns in the same update. The event's data is
        ``{"from": old, "to": new}`` plus ``data``.
        """
        _check_states({to_state})
        self._check_fields("runs", fields, _FIXED_RUN_FIELDS | {"reason"})
        now = self._now()
        lock = self._db.dialect.for_update
        with self._db.transaction(write=True) as tx:
            cur = tx.one(
                f"SELECT state, started_at, attempt FROM runs WHERE id = :id{lock}", {"id": run_id}
            )
            if cur is None:
                raise NotFound(f"no run with id {run_id!r}")
            old = cur["state"]
            if expect is not None and old not in set(expect):
                raise Conflict(
                    f"run {run_id} is {old}, not {' or '.join(sorted(expect)) or '(nothing)'}",
                    fields={"state": old},
                )
            if old in TERMINAL_STATES:
                raise Conflict(f"run {run_id} already ended ({old})", fields={"state": old})
            values: dict[str, Any] = {"state": str(to_state), "reason": reason, **fields}
            values["updated_at"] = now
            if to_state == RunState.RUNNING and cur["started_at"] is None:
                values.setdefault("started_at", now)
            if to_state in TERMINAL_STATES:
                values.setdefault("finished_at", now)
            self._update(tx, "runs", "id = :id", {"id": run_id}, values)
            event_data = {**(data or {}), "from": old, "to": str(to_state)}
            attempt = values.get("attempt", cur["attempt"]) or None  # 0: before the first
            self._insert_event(
                tx, run_id, "run.state", reason, data=event_data, attempt=attempt, ts=now
            )
            return self._get_run_tx(tx, run_id)

    def update_run(self, run_id: str, **fields: Any) -> RunRecord:
        """Set run columns (not the state: use :meth:`transition`). No event is written."""
        self._check_fields("runs", fields, _FIXED_RUN_FIELDS)
        with self._db.transaction(write=bool(fields)) as tx:
            values = {**fields, "updated_at": self._now()} if fields else {}
            self._update(tx, "runs", "id = :id", {"id": run_id}, values)
            return self._get_run_tx(tx, run_id)

    def request_action(self, run_id: str, action: str) -> RunRecord:
        """Ask the controller to ``cancel`` or ``stop`` the run (it clears the request when it
        acts). Conflict if the run already ended."""
        if action not in ACTIONS:
            raise BadInput(f"unknown action {action!r}: use cancel or stop")
        with self._db.transaction(write=True) as tx:
            lock = self._db.dialect.for_update
            cur = tx.one(f"SELECT state FROM runs WHERE id = :id{lock}", {"id": run_id})
            if cur is None:
                raise NotFound(f"no run with id {run_id!r}")
            if cur["state"] in TERMINAL_STATES:
                raise Conflict(
                    f"run {run_id} already ended ({cur['state']}): nothing to {action}",
                    fields={"state": cur["state"]},
                )
            values = {"requested_action": str(action), "updated_at": self._now()}
            self._update(tx, "runs", "id = :id", {"id": run_id}, values)
            return self._get_run_tx(tx, run_id)

    def _get_run_tx(self, tx: Any, run_id: str) -> RunRecord:
        found = self._record(tx, "runs", RunRecord, f"{_RUNS} WHERE id = :id", {"id": run_id})
        if found is None:
            raise NotFound(f"no run with id {run_id!r}")
        return found

    # --- events --------------------------------------------------------------------------------

    def add_event(
        self,
        run_id: str,
        type: str,
        reason: str = "",
        *,
        data: Mapping[str, Any] | None = None,
        attempt: int | None = None,
    ) -> EventRecord:
        """Append one event to the run's history (NotFound if there is no such run)."""
        if not type:
            raise StoreError("an event needs a type")
        with self._db.transaction(write=True) as tx:
            self._run_exists(tx, run_id)
            return self._insert_event(tx, run_id, type, reason, data=data, attempt=attempt)

    def events(
        self,
        run_id: str | None = None,
        *,
        after_id: int = 0,
        limit: int | None = None,
        types: Iterable[str] | None = None,
    ) -> list[EventRecord]:
        """Events with id > ``after_id`` in ascending id (the global order), optionally of one
        run and of some types. Ids commit in order, so polling with the last id seen as
        ``after_id`` never misses an event."""
        where = ["id > :after"]
        # ids are positive: a cursor past the largest id the database holds finds nothing
        params: dict[str, Any] = {"after": sql_count(after_id)}
        if run_id is not None:
            where.append("run_id = :run_id")
            params["run_id"] = run_id
        if types is not None:
            names = {f"t{i}": t for i, t in enumerate(sorted(set(types)))}
            if not names:
                return []
            where.append(f"type IN ({', '.join(':' + k for k in names)})")
            params.update(names)
        sql = f"SELECT {_EVENT_SELECT} FROM events WHERE {' AND '.join(where)} ORDER BY id"
        if limit is not None:
            sql += " LIMIT :limit"
            params["limit"] = sql_count(limit)
        with self._db.transaction() as tx:
            return self._records(tx, "events", EventRecord, sql, params)


def _runs_filter(
    states: Iterable[str] | None, active_only: bool
) -> tuple[str, dict[str, Any]] | None:
    """The WHERE clause (maybe empty) and its parameters for runs in ``states`` (default:
    all), unfinished ones only with ``active_only``; None when no run can match."""
    wanted = set(states) if states is not None else set(RUN_STATES)
    _check_states(wanted)
    if active_only:
        wanted -= TERMINAL_STATES
    if not wanted:
        return None
    params: dict[str, Any] = {f"s{i}": s for i, s in enumerate(sorted(wanted))}
    if wanted == set(RUN_STATES):
        return "", {}
    if wanted == ACTIVE_STATES:
        return _ACTIVE_WHERE, {}
    return f"WHERE state IN ({', '.join(':' + k for k in params)})", params


def _check_states(states: Iterable[str]) -> None:
    bad = sorted(set(states) - RUN_STATES)
    if bad:
        raise BadInput(f"unknown run state {', '.join(bad)}: use one of {', '.join(RunState)}")
