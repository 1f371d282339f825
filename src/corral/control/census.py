"""The machines of belled runs, from one listing per provider rather than one status each.

A belled quiet run (``control.bell``) still has its machine checked by the preemption watcher
(a machine preempted or killed under a live agent that did not ring). At ten thousand runs a
status per run is hundreds of provider calls a second; a provider that lists every machine in
one call (:class:`~corral.providers.listing.SupportsStatusListing`) answers them all at once.
:class:`Census` keeps one listing per such provider, taken again when a look needs it and it
is older than ``max_age_s`` (the controller uses ``Settings.provider_poll_s``), by one thread
while the others wait for it. A machine is read from the listing by the provider's own
mapping (the one its ``status`` uses), so both paths give the same state.

A machine the listing lacks:

* **gone** (what ``status`` says of a machine its provider no longer knows, a 404) when an
  earlier listing held it and this one is complete (every page read, nothing left out) and
  covers its kind of machine: no request of its own;
* otherwise asked for alone (``provider.status``): launched since the listing, not visible
  in it yet, a kind of machine the listing leaves out, or a listing read only in part.

A listing that fails is taken again only once ``max_age_s`` old (not by every look); until
then each machine is asked for alone, as for a provider that cannot list: a failed or
partial listing never makes a machine gone. A machine asked for alone is asked at most once
every ``max_age_s`` (its answer serves the looks meanwhile, as a listing would), so a
machine the listing cannot answer for costs what it cost before the census, never a request
at every look.

Each new listing is compared with the machines looked up in it: one that is no longer
running (preempted, terminated, failed) or no longer listed makes its run due at once
(``on_change``, the controller's schedule), so it is acted on within a listing's age rather
than at the run's next quiet look.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from corral.errors import CorralError
from corral.providers.base import Instance, InstanceState, InstanceStatus, Provider
from corral.providers.listing import StatusListing, SupportsStatusListing

log = logging.getLogger("corral.control")


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
        #: provider name -> (monotonic time taken, the listing)
        self._lists: dict[str, tuple[float, StatusListing[Any]]] = {}
        #: provider name -> launch key -> (run id, machine), of the machines looked up in a
        #: listing (compared with each new one until they change or their run is forgotten)
        self._watched: dict[str, dict[str, tuple[str, Instance]]] = {}
        #: provider name -> launch keys a listing held (one a later complete listing lacks
        #: is gone; one never listed is asked for alone)
        self._held: dict[str, set[str]] = {}
        #: provider name -> launch key -> (monotonic time, status) of machines asked alone
        self._alone: dict[str, dict[str, tuple[float, InstanceStatus]]] = {}
        #: run id -> (provider name, launch key) of its machine looked at
        self._machine_of: dict[str, tuple[str, str]] = {}
        self._locks: dict[str, threading.Lock] = {}
        #: provider name -> (monotonic time, the error) of its last listing that failed
        self._failed: dict[str, tuple[float, Exception]] = {}
        self._lock = threading.Lock()
        #: listings taken (for the tests and the benchmark)
        self.listings = 0
        #: machines a listing answered gone without a request of their own
        self.gone_from_listing = 0

    @staticmethod
    def lists(provider: Provider) -> bool:
        """Whether ``provider`` can give every machine's status in one call."""
        return isinstance(provider, SupportsStatusListing)

    def status(
        self, name: str, provider: Provider, instance: Instance, run_id: str, max_age_s: float
    ) -> InstanceStatus:
        """``instance``'s status from a listing of ``provider`` no older than ``max_age_s``
        (taken now if there is none), or from ``provider.status`` where the provider cannot
        list, the last listing failed, or the listing does not settle the machine (see the
        module). Raises what the provider raises."""
        if not isinstance(provider, SupportsStatusListing):
            return provider.status(instance)
        with self._lock:
            self._machine_of[run_id] = (name, instance.key)
        listing = self._listing(name, provider, max_age_s)
        if listing is None:  # the last listing failed: asked alone until it is retaken
            return self._alone_status(name, provider, instance, max_age_s)
        listed = listing.status(instance)
        if listed is None:
            with self._lock:
                held = instance.key in self._held.get(name, ())
            gone = listing.gone(instance) if held else None
            if gone is None:  # launched since, not visible yet, not listed, or a partial list
                return self._alone_status(name, provider, instance, max_age_s)
            with self._lock:
                self.gone_from_listing += 1
            return gone
        with self._lock:
            self._watched.setdefault(name, {})[instance.key] = (run_id, instance)
            self._held.setdefault(name, set()).add(instance.key)
        return listed

    def _alone_status(
        self, name: str, provider: Provider, instance: Instance, max_age_s: float
    ) -> InstanceStatus:
        """``provider.status(instance)``, asked at most once every ``max_age_s`` (errors are
        not kept: the next look asks again)."""
        now = self.clock()
        with self._lock:
            found = self._alone.get(name, {}).get(instance.key)
        if found is not None and now - found[0] < max_age_s:
            return found[1]
        st = provider.status(instance)
        with self._lock:
            self._alone.setdefault(name, {})[instance.key] = (now, st)
        return st

    def forget(self, run_id: str) -> None:
        """The run is over for this controller: its machine is no longer compared."""
        with self._lock:
            name, key = self._machine_of.pop(run_id, ("", ""))
            self._watched.get(name, {}).pop(key, None)
            self._held.get(name, set()).discard(key)
            self._alone.get(name, {}).pop(key, None)

    def _listing(
        self, name: str, provider: SupportsStatusListing, max_age_s: float
    ) -> StatusListing[Any] | None:
        """The provider's listing no older than ``max_age_s``, or None when the last one
        failed less than ``max_age_s`` ago."""
        with self._lock:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:  # one thread lists; the others wait for its answer
            now = self.clock()
            found = self._lists.get(name)
            if found is not None and now - found[0] < max_age_s:
                return found[1]
            failed = self._failed.get(name)
            if failed is not None and now - failed[0] < max_age_s:
                return None  # not asked again by every look till then
            self.listings += 1
            try:
                listing = provider.statuses()
            except CorralError as e:
                log.info("%s: cannot list machines (each is asked for alone): %s", name, e)
                self._failed[name] = (now, e)
                self._lists.pop(name, None)
                return None
            self._failed.pop(name, None)
            self._lists[name] = (now, listing)
        self._compare(name, listing)
        return listing

    def _compare(self, name: str, listing: StatusListing[Any]) -> None:
        with self._lock:
            watched = list(self._watched.get(name, {}).items())
        changed = []
        for key, (run_id, instance) in watched:
            try:
                st = listing.status(instance) or listing.gone(instance)
            except CorralError:
                st = None  # its run's look asks again
            if st is None or not _steady(st.state):
                changed.append((key, run_id))
        with self._lock:
            mine = self._watched.get(name, {})
            for key, _ in changed:
                mine.pop(key, None)  # told once; a look finds it again if listed
        if changed and self.on_change is not None:
            self.on_change([run_id for _, run_id in changed])
