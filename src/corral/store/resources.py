"""The resource intent log: how corral never loses track of a paid instance.

Protocol (the controller follows it; the store enforces what it can):

1. ``record_intent(key=...)`` BEFORE ``provider.launch(offer, bootstrap, key)``.
2. ``update_resource(key, state="active", instance_id=..., instance=...)`` once launch returns.
3. ``update_resource(key, state="terminating")`` before ``provider.terminate``.
4. ``update_resource(key, state="gone")`` only once the provider confirms the instance gone.

A restarted controller reconciles every row of ``resources(open_only=True)``: an ``intent`` row
means launch may or may not have happened, so it calls ``launch`` again with the same key
(idempotent) or asks the provider. ``gone`` is final.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.errors import BadInput, Conflict, NotFound
from corral.store._core import StoreBase, select_list
from corral.store.db import Tx
from corral.store.records import RESOURCE_COLUMNS, ResourceRecord
from corral.store.states import RESOURCE_STATES, ResourceState

_SELECT = select_list(RESOURCE_COLUMNS)


class ResourceOps(StoreBase):
    def record_intent(
        self,
        *,
        run_id: str,
        attempt: int,
        provider: str,
        key: str,
        data: Mapping[str, Any] | None = None,
    ) -> ResourceRecord:
        """Write the ``intent`` row for ``key``. Idempotent: if the key exists, the existing
        row is returned unchanged (Conflict if it belongs to another run)."""
        return self._write_intent(run_id, attempt, provider, key, data)[0]

    def claim_intent(
        self,
        *,
        run_id: str,
        attempt: int,
        provider: str,
        key: str,
        data: Mapping[str, Any] | None = None,
    ) -> ResourceRecord | None:
        """Write the ``intent`` row for ``key`` if it has none yet: the row when this call
        wrote it (the caller launches ``key``), None when the key already had one (another
        launcher of the same attempt wrote it first and launches it; a relaunch of an old
        intent is for a later look). Conflict if the key belongs to another run."""
        record, wrote = self._write_intent(run_id, attempt, provider, key, data)
        return record if wrote else None

    def _write_intent(
        self,
        run_id: str,
        attempt: int,
        provider: str,
        key: str,
        data: Mapping[str, Any] | None,
    ) -> tuple[ResourceRecord, bool]:
        now = self._now()
        values = {
            "run_id": run_id,
            "attempt": int(attempt),
            "provider": provider,
            "key": key,
            "state": ResourceState.INTENT.value,
            "instance_id": None,
            "instance": None,
            "data": dict(data or {}),
            "created_at": now,
            "updated_at": now,
        }
        with self._db.transaction(write=True) as tx:
            self._run_exists(tx, run_id)
            wrote = self._insert(tx, "resources", values, unique=("key",)) is not None
            record = self._get_tx(tx, key)
        if record.run_id != run_id:
            raise Conflict(f"resource key {key!r} already belongs to run {record.run_id}")
        return record, wrote

    def update_resource(
        self,
        key: str,
        *,
        state: str | None = None,
        instance_id: str | None = None,
        instance: Mapping[str, Any] | None = None,
    ) -> ResourceRecord:
        """Record what happened to the instance behind ``key``. Arguments left None are left
        unchanged. A ``gone`` resource cannot come back (Conflict)."""
        if state is not None and state not in RESOURCE_STATES:
            raise BadInput(
                f"unknown resource state {state!r}: use one of {', '.join(ResourceState)}"
            )
        values: dict[str, Any] = {}
        if state is not None:
            values["state"] = str(state)
        if instance_id is not None:
            values["instance_id"] = instance_id
        if instance is not None:
            values["instance"] = dict(instance)
        with self._db.transaction(write=bool(values)) as tx:
            current = self._get_tx(tx, key, lock=True)
            if current.state == ResourceState.GONE and values.get("state", "gone") != "gone":
                raise Conflict(f"resource {key!r} is gone; it cannot become {state}")
            if values:
                values["updated_at"] = self._now()
                self._update(tx, "resources", '"key" = :key', {"key": key}, values)
            return self._get_tx(tx, key)

    def get_resource(self, key: str) -> ResourceRecord:
        with self._db.transaction() as tx:
            return self._get_tx(tx, key)

    def resources(
        self, *, run_id: str | None = None, open_only: bool = False
    ) -> list[ResourceRecord]:
        """Resources in creation order; ``open_only``: those not confirmed gone."""
        where, params = [], {}
        if run_id is not None:
            where.append("run_id = :run_id")
            params["run_id"] = run_id
        if open_only:
            where.append("state <> :gone")
            params["gone"] = ResourceState.GONE.value
        sql = f"SELECT {_SELECT} FROM resources"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._db.transaction() as tx:
            return self._records(tx, "resources", ResourceRecord, sql + " ORDER BY id", params)

    def _get_tx(self, tx: Tx, key: str, lock: bool = False) -> ResourceRecord:
        suffix = self._db.dialect.for_update if lock else ""
        sql = f'SELECT {_SELECT} FROM resources WHERE "key" = :key{suffix}'
        found = self._record(tx, "resources", ResourceRecord, sql, {"key": key})
        if found is None:
            raise NotFound(f"no resource with key {key!r}")
        return found
