"""One listing of every object of an account, shared by every run's status for a while.

Asking a cloud about each run's object alone costs one request per run per look, and a
controller watching many runs would spend its API budget on that. Instead one listing of
every object serves every look for ``ttl_s`` seconds. The rules that keep it honest:

* The listing is taken under a lock: the callers that find it stale at the same time wait for
  one refresh and read its result. ``fresh=True`` takes a new one whatever its age (what must
  not miss an object: a lookup before a create, a leak sweep).
* A key the provider changed (:meth:`ListingCache.touch`: created, deleted, stopped...) is not
  read from a listing taken before the change: :meth:`ListingCache.get` asks for it alone
  until a newer listing exists; a listing taken after it drops the mark.
* A listing the provider knows holds every object (:class:`Whole`: read in one answer) says
  so to the controller's census (:func:`is_whole`), which then takes a key it lacks for gone;
  any other listing proves only what it holds.
* A key missing from the listing (made since, or gone) is asked for alone as well. With
  ``keep_direct=True`` that answer replaces the key's entry in the listing it was read
  against (or removes it, when the object is gone), so the next look within ``ttl_s`` does
  not ask again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from corral.providers.base import Instance, InstanceStatus
from corral.providers.listing import StatusListing

K = TypeVar("K")
V = TypeVar("V")


class Whole(dict[K, V]):
    """A listing that holds every object there was when it was read (one answer, not pages
    that objects made or deleted meanwhile could shift)."""


def is_whole(listing: Mapping[K, V]) -> bool:
    """Whether ``listing`` is known to hold every object (a :class:`Whole`)."""
    return isinstance(listing, Whole)


class ListingCache(Generic[K, V]):
    """``list_all`` lists every object by key; ``get_one`` reads one (None: it does not
    exist); ``clock`` is monotonic seconds."""

    def __init__(
        self,
        list_all: Callable[[], dict[K, V]],
        get_one: Callable[[K], V | None],
        ttl_s: float,
        clock: Callable[[], float],
        *,
        keep_direct: bool = False,
    ) -> None:
        self._list_all = list_all
        self._get_one = get_one
        self.ttl_s = ttl_s
        self._clock = clock
        self._keep_direct = keep_direct
        self._lock = threading.Lock()
        #: (taken at, objects by key)
        self._snapshot: tuple[float, dict[K, V]] | None = None
        #: key -> when it was changed, for keys changed after the listing was taken
        self._touched: dict[K, float] = {}

    def touch(self, key: K) -> None:
        """``key`` changed: read it alone until a listing newer than the change."""
        with self._lock:
            self._touched[key] = self._clock()

    def listing(self, *, fresh: bool = False) -> tuple[float, dict[K, V]]:
        """(taken at, objects by key): the listing, taken anew if older than ``ttl_s`` or
        ``fresh``. The dict is the cache's own: read it, do not change it."""
        with self._lock:
            now = self._clock()
            snap = self._snapshot
            if not fresh and snap is not None and now - snap[0] < self.ttl_s:
                return snap
            self._snapshot = (now, self._list_all())
            self._touched = {k: t for k, t in self._touched.items() if t >= now}
            return self._snapshot

    def unchanged(self, key: K, taken: float) -> bool:
        """Whether the provider left ``key`` alone since a listing taken at ``taken`` (one
        that changed it since is read alone)."""
        with self._lock:
            touched = self._touched.get(key)
        return touched is None or touched < taken

    def get(self, key: K) -> V | None:
        """The object from the listing, or read alone when it is not listed or was touched
        since the listing was taken; None: it does not exist."""
        taken, listed = self.listing()
        touched = self._touched.get(key)
        if key in listed and (touched is None or touched < taken):
            return listed[key]
        value = self._get_one(key)
        if self._keep_direct:
            with self._lock:
                if self._snapshot is not None and self._snapshot[0] == taken:
                    if value is None:
                        self._snapshot[1].pop(key, None)
                    else:
                        self._snapshot[1][key] = value
        return value


def census_listing(
    cache: ListingCache[str, V], read: Callable[[Instance, V | None], InstanceStatus]
) -> StatusListing[V]:
    """A fresh listing of ``cache`` for the controller's census (``SupportsStatusListing``),
    which every run's status then shares for ``ttl_s``, each machine read by ``read`` (the
    mapping ``status()`` uses): complete when the listing is :class:`Whole`; a machine the
    provider changed since it was taken is left to be asked for alone."""
    taken, listed = cache.listing(fresh=True)
    return StatusListing(
        dict(listed),
        read,
        complete=is_whole(listed),
        covers=lambda inst: cache.unchanged(inst.instance_id, taken),
    )
