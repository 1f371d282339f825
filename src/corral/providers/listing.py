"""A provider capability kept beside ``base.py``: the status of every machine in one call.

A provider that can list every machine it holds for corral in one request (or one paged
listing) answers the controller's census (``control.census``) with a :class:`StatusListing`:
the records of that listing, read into statuses by the **same** function its
:meth:`~corral.providers.base.Provider.status` uses on a record it fetched alone, so the two
paths cannot disagree. The census asks each listing about the machines of many runs:

* a machine the listing holds: its status, read from its record (once per listing);
* a machine it lacks: :meth:`StatusListing.gone` says what ``status()`` says of a machine the
  provider no longer knows (its 404), but only when the listing is **complete** (every page
  read, nothing left out) and the machine is of a kind it lists (``covers``); otherwise None,
  and the machine is asked for alone. (The census asks ``gone`` only of a machine an
  earlier listing held: one launched since, or not yet visible, is never taken for gone.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from corral.providers.base import Instance, InstanceStatus

R = TypeVar("R")


class StatusListing(Generic[R]):
    """One listing of a provider's machines. ``records``: what the listing returned, by the
    id ``id_of`` reads from an :class:`Instance` (its ``instance_id`` unless said);
    ``read(instance, record)``: the provider's one mapping of a record to a status (``record``
    None: the provider does not know the machine, as a 404 says); ``complete``: every page
    was read and the listing holds every machine ``covers`` accepts (all by default).

    Thread-safe: a machine's status is read once per listing, under a lock (a read may ask
    the provider more, or remember what it saw, as ``status()`` does)."""

    def __init__(
        self,
        records: Mapping[str, R],
        read: Callable[[Instance, R | None], InstanceStatus],
        *,
        complete: bool,
        id_of: Callable[[Instance], str] | None = None,
        covers: Callable[[Instance], bool] | None = None,
    ) -> None:
        self.records = records
        self.complete = complete
        self._read = read
        self._id_of = id_of or (lambda inst: inst.instance_id)
        self._covers = covers or (lambda inst: True)
        self._read_lock = threading.Lock()
        #: launch key -> the status read for it from this listing
        self._read_for: dict[str, InstanceStatus] = {}

    def __len__(self) -> int:
        return len(self.records)

    def status(self, instance: Instance) -> InstanceStatus | None:
        """``instance``'s status from its record, or None: the listing does not hold it (or
        does not cover its kind of machine)."""
        if not self._covers(instance):
            return None
        record = self.records.get(self._id_of(instance))
        if record is None:
            return None
        return self._once(instance, record)

    def gone(self, instance: Instance) -> InstanceStatus | None:
        """What ``status()`` says of ``instance`` now the provider does not know it (its 404),
        when this listing proves it: complete, covering the machine, and without it. None
        where it proves nothing (partial, not covered, or listed)."""
        if not self.complete or not self._covers(instance):
            return None
        if self._id_of(instance) in self.records:
            return None
        return self._once(instance, None)

    def _once(self, instance: Instance, record: R | None) -> InstanceStatus:
        with self._read_lock:
            found = self._read_for.get(instance.key)
            if found is None:
                found = self._read(instance, record)
                self._read_for[instance.key] = found
            return found


class SupportsStatusListing:
    """The status of every machine it holds for corral in one call (one listing), so the
    controller asks once for many runs instead of once per run (``control.census``)."""

    def statuses(self) -> StatusListing[Any]:  # pragma: no cover - interface
        """One listing of every machine the provider holds for corral now, read by the same
        mapping as :meth:`Provider.status`. Raises the provider's error when nothing could be
        listed; a listing that could be read only in part comes back with ``complete``
        False (what it holds is true; what it lacks proves nothing)."""
        raise NotImplementedError
