"""This controller's leases: which live runs it babysits when several controllers share one
store (see ``Store.lease_share``).

Each controller has an owner id, stable for its ``CORRAL_HOME`` on its host (a controller
restarted on the same home picks its runs up again at once; only one runs per home, by the
home's lock). Each holds about its share of the active runs: one over it (a controller joined)
gives RUNNING runs of the ``movable`` providers up to the others; a run nobody took for a lease
is taken past the share. :meth:`Leases.refresh` takes the free and expired runs and renews its
own; :meth:`Leases.holds` answers from what the last refresh got, and says no once that is
older than half the lease (a controller that cannot reach the store stops acting on its runs
before another one may take them over). The loop reads only the runs this controller holds and
the free ones (``Store.run_heads(owner=...)``), so a tick costs a controller its share.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable, Collection
from pathlib import Path

from corral.control.context import log
from corral.store.store import Store

#: the feed consumer that delivers webhooks (one controller at a time)
WEBHOOKS = "webhooks"


def owner_id(home: Path) -> str:
    """``<host>:<8 hex of the home's path>``: this controller among those sharing a store."""
    digest = hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:8]
    return f"{socket.gethostname()}:{digest}"


class Leases:
    def __init__(
        self,
        store: Store,
        owner: str,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        movable: Collection[str] = (),
    ):
        self.store = store
        self.owner = owner
        self.ttl_s = ttl_s
        #: the providers whose runs may move to another controller (``Provider.shared_machines``)
        self.movable = frozenset(movable)
        self.clock = clock
        self._held: set[str] = set()
        self._at: float | None = None
        #: the runs read (its own and the free ones) at the last refresh
        self._seen: set[str] = set()
        #: the active runs this controller does not hold (another one does, or none yet), at
        #: the last refresh
        self.elsewhere = 0

    def refresh(self, active: Collection[str] | None = None) -> set[str]:
        """Take and renew leases now; the runs held. A store failure keeps the last answer
        (which :meth:`holds` stops trusting after half a lease).

        ``active``: the ids of the runs just read (this controller's and the free ones:
        ``Store.run_heads(owner=...)``). When none is new since the last refresh and that is
        less than a quarter of a lease old, the store is not asked (ten thousand runs are not
        read again every tick for nothing): a new run is taken at once, a lease renewed in
        time, and a run another controller let expire is taken within a quarter of a
        lease."""
        now = self.clock()
        if (
            active is not None
            and self._at is not None
            and now - self._at < self.ttl_s / 4
            and all(rid in self._seen for rid in active)
        ):
            return set(self._held)
        try:
            got = self.store.lease_share(self.owner, self.ttl_s, movable=self.movable)
            self._held = set(got.held)
            self.elsewhere = got.active - len(got.held)
            self._at = now
            self._seen = set(active) if active is not None else set()
        except Exception as e:
            log.warning("leases: cannot reach the store: %s", e)
        return set(self._held) if self.fresh() else set()

    def fresh(self) -> bool:
        return self._at is not None and self.clock() - self._at < self.ttl_s / 2

    def holds(self, run_id: str) -> bool:
        return run_id in self._held and self.fresh()

    def webhooks(self) -> bool:
        """Whether this controller delivers the webhooks now (takes or keeps that lease)."""
        return self.store.lease_consumer(WEBHOOKS, self.owner, self.ttl_s)

    def release(self) -> None:
        """Give every lease up (a clean stop): another controller takes over at once."""
        try:
            self.store.release_runs(self.owner)
            self.store.release_consumer(WEBHOOKS, self.owner)
        except Exception as e:
            log.warning("leases: releasing failed: %s", e)
        self._held = set()
