"""Watching one run as it goes: its new log lines and fresh snapshots from one store held
open for the whole watch (a follower polls several times a second; opening the store on
each poll would cost more than the poll)."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from corral.service.logs import LogTailer, open_logs
from corral.service.run_view import RunView
from corral.service.runs import snapshot
from corral.store import AttemptRecord, Store


class RunWatch:
    """A run being watched. ``tailer`` reads its new stage log lines; :meth:`snapshot` gives
    the run and its current attempt as they are now. Close it (or use it as a context
    manager) when done: a store it opened is closed then, a store it was given is not."""

    def __init__(
        self,
        ref: str,
        *,
        stages: Iterable[str] | None = None,
        from_end: bool = False,
        store: Store | None = None,
    ):
        self._owned = store is None
        self._store = Store.open() if store is None else store
        try:
            self.tailer: LogTailer = open_logs(
                ref, stages=stages, from_end=from_end, store=self._store
            )
        except BaseException:
            self.close()
            raise
        #: the watched run's id (``ref`` may have been a prefix or a name)
        self.run_id = self.tailer.run_id

    def snapshot(self) -> tuple[RunView, AttemptRecord | None]:
        """The run and its current attempt (whose ``data["status"]`` is the agent's last
        status as the controller cached it)."""
        return snapshot(self.run_id, store=self._store)

    def close(self) -> None:
        if self._owned:
            self._store.close()

    def __enter__(self) -> RunWatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def watch_run(
    ref: str,
    *,
    stages: Iterable[str] | None = None,
    from_end: bool = False,
    store: Store | None = None,
) -> RunWatch:
    """A :class:`RunWatch` over the run named by ``ref`` (id, id prefix or name): NotFound
    for a run, or a stage of ``stages``, that does not exist; ``from_end`` skips the log
    lines already written."""
    return RunWatch(ref, stages=stages, from_end=from_end, store=store)
