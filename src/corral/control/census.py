"""The machines of belled runs, from one listing per provider rather than one status each.

A belled quiet run (``control.bell``) still has its machine checked by the preemption watcher
(a machine preempted or killed under a live agent that did not ring). At ten thousand runs a
status per run is hundreds of provider calls a second; a provider that lists every machine in
one call (:class:`~corral.providers.base.SupportsStatusListing`) answers them all at once.
:class:`Census` keeps one listing per such provider, taken again when a look needs it and it
is older than ``max_age_s`` (the controller uses ``Settings.provider_poll_s``), by one thread
while the others wait for it; a machine the listing lacks (launched since) is asked for
alone, and so is every machine of a provider that cannot list.

Each new listing is compared with the machines looked up in it: one that is no longer
running (preempted, terminated, failed) or no longer listed makes its run due at once
(``on_change``, the controller's schedule), so it is acted on within a listing's age rather
than at the run's next quiet look.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from corral.providers.base import Instance, InstanceState, InstanceStatus, Provider
from corral.providers.listing import SupportsStatusListing


def _steady(state: InstanceState) -> bool:
    """A machine in this state needs no look before its run's next one (compared by
    identity: ten thousand of them per listing)."""
    return state is InstanceState.RUNNING or state is InstanceState.PROVISIONING


class Census:
    """One listing per provider that can list, shared by every look (thread-safe)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[list[str]], None] | None = None,
    ):
        self.clock = clock
        #: told the runs whose machine a new listing shows changed (look at them now)
        self.on_change = on_change
        #: provider name -> (monotonic time taken, launch key -> status)
        self._lists: dict[str, tuple[float, dict[str, InstanceStatus]]] = {}
        #: provider name -> launch key -> run id, of the machines looked up in a listing
        #: (compared with each new one until they change or their run is forgotten)
        self._watched: dict[str, dict[str, str]] = {}
        #: run id -> (provider name, launch key) of its machine watched
        self._machine_of: dict[str, tuple[str, str]] = {}
        self._locks: dict[str, threading.Lock] = {}
        #: provider name -> (monotonic time, the error) of its last listing that failed
        self._failed: dict[str, tuple[float, Exception]] = {}
        self._lock = threading.Lock()
        #: listings taken (for the tests and the benchmark)
        self.listings = 0

    @staticmethod
    def lists(provider: Provider) -> bool:
        """Whether ``provider`` can give every machine's status in one call."""
        return isinstance(provider, SupportsStatusListing)

    def status(
        self, name: str, provider: Provider, instance: Instance, run_id: str, max_age_s: float
    ) -> InstanceStatus:
        """``instance``'s status from a listing of ``provider`` no older than ``max_age_s``
        (taken now if there is none), or from ``provider.status`` where the provider cannot
        list or the listing lacks the machine. Raises what the provider raises (a listing
        that failed, again to every look until it is ``max_age_s`` old)."""
        if not isinstance(provider, SupportsStatusListing):
            return provider.status(instance)
        listed = self._listing(name, provider, max_age_s).get(instance.key)
        if listed is None:  # launched since the listing, or gone from it: asked alone
            return provider.status(instance)
        with self._lock:
            self._watched.setdefault(name, {})[instance.key] = run_id
            self._machine_of[run_id] = (name, instance.key)
        return listed

    def forget(self, run_id: str) -> None:
        """The run is over for this controller: its machine is no longer compared."""
        with self._lock:
            name, key = self._machine_of.pop(run_id, ("", ""))
            self._watched.get(name, {}).pop(key, None)

    def _listing(
        self, name: str, provider: SupportsStatusListing, max_age_s: float
    ) -> dict[str, InstanceStatus]:
        with self._lock:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:  # one thread lists; the others wait for its answer
            now = self.clock()
            found = self._lists.get(name)
            if found is not None and now - found[0] < max_age_s:
                return found[1]
            failed = self._failed.get(name)
            if failed is not None and now - failed[0] < max_age_s:
                raise failed[1].with_traceback(None)  # not asked by every look till then
            self.listings += 1
            try:
                listing = provider.statuses()
            except Exception as e:
                self._failed[name] = (now, e)
                raise
            self._failed.pop(name, None)
            self._lists[name] = (now, listing)
        self._compare(name, listing)
        return listing

    def _compare(self, name: str, listing: dict[str, InstanceStatus]) -> None:
        steady = {k for k, st in listing.items() if _steady(st.state)}
        changed = []
        with self._lock:
            watched = self._watched.get(name, {})
            for key in [k for k in watched if k not in steady]:
                changed.append(watched.pop(key))  # told once; a look finds it again if listed
        if changed and self.on_change is not None:
            self.on_change(changed)
