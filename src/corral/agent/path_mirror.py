"""Mirror the checkpoints a script writes on its own (``checkpoints.path``) and restore them.

For scripts that do not use corral's SDK: the plan names workdir-relative files, directories or
globs (``plan.checkpoint_paths``: ``ckpt.pt``, ``out/checkpoint-*``, ``runs/*/weights/last.pt``).
Each match is one *item* (a file, or a directory with every file under it).

Remote layout: ``<checkpoint_storage>/<run_id>/mirror/<seq>/`` (``seq``: ten digits, growing
over the run's attempts), holding ``files/<item path>[/<file>]`` and a ``COMPLETE`` manifest
written last (JSON: the item's workdir path, its kind, time, each file's size and sha256).
Without ``COMPLETE`` a snapshot does not exist.

* **complete**: a version of an item (its files' sizes, mtimes and inodes) is copied once no
  process of the job (the agent and its descendants: ``/proc/<pid>/fd``) holds any of its files
  open for writing and it did not change between two looks (every ``poll_seconds``, and
  ``QUICK_LOOK_S`` after one that found a new version; a directory, whose files are written
  one after another, for ``DIR_STILL_S``), or once it was
  moved into place whole (a rename: another inode at the path than at the previous look, or a
  status change after the last write) - whatever ``checkpoints.settle`` says. Without procfs
  (no open files to see), once unchanged for ``plan.checkpoint_settle_s``. A copy is checked
  after it is read: a version that changed meanwhile is discarded (no manifest) and the next
  complete one is copied, so a checkpoint rewritten in place every second is still copied, and
  one caught mid-write never is. A version whose writer died holding it open (killed by the
  stop, or by the OOM killer while the job runs: its death closed the file) is torn, however
  still it stands afterwards: not copied, unless the stages all end on their own. One that could not be copied for a few settle periods is a
  ``checkpoint.warning`` while the run is live.
* **the stop**: right before the stages are stopped (``stopping()``, on the runner's thread)
  one look notes what is closed then; looks come every ``QUICK_LOOK_S`` until the stages
  are down. **After the stages** one more look copies every version not up yet that is
  complete: seen closed and unchanged since, moved into place whole, or written by stages
  that all ended on their own (exit 0 or 75). One written after the last look by a job that
  was killed (or died of the stop signal) may be torn: it is not copied.
* **before the stages**: what the workdir holds already (and was not restored) is mirrored
  only once the job writes it again. The newest complete snapshot is restored to its path in the workdir
  (each file's size and sha256 checked as it streams in, into a ``.corral-restore`` name
  renamed into place); a corrupt one is skipped (``checkpoint.skipped``) for the one before.
  A workdir that already holds it (the same machine) is not downloaded again. Either way the
  stages then resume from it (``runner.set_resume``: ``CORRAL_RESUME=1``,
  ``CORRAL_RESUME_FROM=<path>``, the stage's ``resume_args``). Without storage, from the
  second attempt on, the newest item already in the workdir is the one resumed from.
* retention: the newest ``checkpoint_policy.keep_last`` snapshots (the plan's) are kept.
* storage set and nothing recognised at the paths for the whole attempt, or for a few settle
  periods while the job makes progress, or a job that starts far below the step of the
  snapshot restored for it (``mirror_advice``): a ``checkpoint.warning`` event and
  ``status()["checkpoint_mirror"]["warning"]``.
* each snapshot's manifest keeps the stages' progress steps when it was copied (``steps``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from corral.agent.mirror_advice import MirrorAdvice, stage_steps
from corral.agent.mirror_snapshots import (
    Changed,
    Snapshot,
    download,
    matches,
    quietly,
    read_snapshot,
    sequence_numbers,
    snapshot_dir,
    write_snapshot,
)
from corral.agent.path_items import (
    Content,
    Item,
    alive,
    find_items,
    item_at,
    open_for_writing,
    process_tree,
)
from corral.errors import CorralError
from corral.sdk.manifest import CheckpointError
from corral.sdk.storage import Storage, resolve_location
from corral.storage.errors import StorageError
from corral.storage.s3_client import CREDENTIAL_VARS, ENDPOINT_VARS, REGION_VARS, redact
from corral.wire.events import (
    AGENT_ERROR,
    CHECKPOINT_RESTORED,
    CHECKPOINT_SKIPPED,
    CHECKPOINT_UPLOADED,
    CHECKPOINT_WARNING,
)
from corral.wire.node import EventSink, NodeRunner
from corral.wire.plan import AgentPlan

MIRROR_DIR = "mirror"
#: a directory must stay the same this long (its files are written one after another)
DIR_STILL_S = 1.0
#: the copying thread's nice value: the job (0) gets the CPU first
MIRROR_NICE = 10
#: how soon the mirror looks again after a new version appeared, and while the stages stop
QUICK_LOOK_S = 0.1


class PathMirror:
    """The node hook that mirrors and restores the checkpoints at ``plan.checkpoint_paths``."""

    name = "checkpoint_mirror"

    def __init__(
        self,
        plan: AgentPlan,
        events: EventSink,
        *,
        storage: Storage | None = None,
        environ: Mapping[str, str] | None = None,
        poll_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        root_pid: int | None = None,
    ):
        self.plan = plan
        self.patterns = list(plan.checkpoint_paths)
        self.workdir = plan.workdir
        self.settle_s = plan.checkpoint_settle_s
        self._events = events
        self._poll = poll_seconds
        self._clock, self._wall = clock, wall
        env = dict(os.environ if environ is None else environ)
        for var in (*ENDPOINT_VARS, *REGION_VARS):  # not secret: the plan may set them
            if plan.env.get(var):
                env[var] = plan.env[var]
        self._secrets = [env[v] for v in CREDENTIAL_VARS if len(env.get(v, "")) >= 4]
        self._problem: str | None = None
        self.storage: Storage | None = None
        self.root = ""
        self.keep_last = 3
        if plan.checkpoint_storage:
            try:
                self.keep_last = plan.checkpoint_policy.keep_last
                uri = plan.checkpoint_storage
                if storage is None:
                    options = {"environ": env} if uri.startswith("s3://") else {}
                    storage, base = resolve_location(uri, **options)
                else:
                    base = uri
                self.storage = storage
                self.root = storage.join(base, plan.run_id, MIRROR_DIR)
            except CorralError as exc:
                self._problem = f"checkpoint storage: {exc}"
        #: the job's processes are this one's descendants (the agent's)
        self._root_pid = os.getpid() if root_pid is None else root_pid
        self._lock = threading.Lock()  # what status() reads
        self._look_lock = threading.Lock()  # a look (the loop's, or the one at the stop)
        self._done: dict[str, Content] = {}  # rel -> content mirrored (or restored)
        self._seen: dict[str, Content] = {}  # rel -> content at the previous look
        self._since: dict[str, tuple[Content, float]] = {}  # rel -> (content, first seen)
        self._closed: dict[str, Content] = {}  # rel -> content seen closed at its last look
        self._holders: dict[str, set[int]] = {}  # rel -> the pids writing it at the last look
        self._torn: dict[str, Content] = {}  # rel -> a version whose writer died writing it
        self._pending: dict[str, float] = {}  # rel -> when it first differed from its copy
        self._stuck: set[str] = set()  # rels warned about as never copyable
        self._ready: list[Item] = []
        self._changed = False  # the last look found a new version
        self._quick = False  # the wait before the last look was a quick one
        self._runner: NodeRunner | None = None
        self._stopping = threading.Event()
        self.advice = MirrorAdvice(
            self.patterns, self.settle_s, self._warn, clock, workdir=self.workdir
        )
        self._next_seq = 1
        self._last_look: float | None = None  # wall time of the previous look
        self._last_inodes: dict[str, int] = {}  # rel -> inode at its path then
        self.recognised = False
        self.uploaded = 0
        self.last_uploaded: str | None = None
        self.restored: str | None = None
        self.last_error: str | None = None
        self.warning: str | None = None
        self._restored_snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the hook --------------------------------------------------------------------------

    def before_stages(self, runner: NodeRunner) -> str | None:
        if self._problem:
            return self._problem
        try:
            path = self._restore() if self.storage is not None else self._newest_local()
        except StorageError as exc:
            return f"checkpoint storage: {self._clean(str(exc))}"
        if path is not None:
            runner.set_resume(path)
        if self.storage is not None:
            # what is there already and not restored (a checkpoint an earlier attempt on this
            # machine left half-written, say) is not mirrored unless the job writes it again
            for item in self._look():
                self._done.setdefault(item.rel, item.content)
            self._runner = runner
            snap = self._restored_snapshot
            self.advice.start(runner, snap.rel if snap else None, snap.steps if snap else {})
            self._thread = threading.Thread(
                target=self._loop, name="checkpoint-mirror", daemon=True
            )
            self._thread.start()
        return None

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None:
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        problem = None
        try:
            self._final(runner)
        except Exception as exc:
            problem = self._report(f"checkpoint mirror: {self._describe(exc)}")
        if not self.recognised and not self.advice.said_nothing:  # said once is enough
            self.warning = (
                f"checkpoints.path {', '.join(self.patterns)} matched no checkpoint in the "
                f"workdir: nothing was mirrored to {self.plan.checkpoint_storage} (a new "
                "machine would start from scratch)"
            )
            self._events.emit(
                CHECKPOINT_WARNING, data={"message": self.warning, "paths": self.patterns}
            )
        return problem if phase == "succeeded" else None

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "checkpoint_mirror": {
                    "paths": self.patterns,
                    "uri": self.root or None,
                    "uploaded": self.uploaded,
                    "last_uploaded": self.last_uploaded,
                    "restored": self.restored,
                    "last_error": self.last_error,
                    "warning": self.warning,
                }
            }

    def waiting(self) -> list[str]:
        """The items whose version at the last look is not copied yet."""
        with self._look_lock:
            return sorted(self._pending)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- restore ---------------------------------------------------------------------------

    def _newest_local(self) -> str | None:
        """Without storage: from the second attempt on, the newest item in the workdir (an
        earlier attempt on this machine left it; a first attempt never resumes, whatever an
        earlier run left in the directory)."""
        items = find_items(self.workdir, self.patterns)
        if not items or self.plan.attempt < 2:
            return None
        self.recognised = True
        return os.path.join(self.workdir, items[-1].rel)

    def snapshots(self) -> list[Snapshot]:
        """Complete snapshots in storage, oldest first (also sets the next sequence number)."""
        assert self.storage is not None
        out: list[Snapshot] = []
        highest = 0
        for seq in sequence_numbers(self.storage, self.root):
            highest = max(highest, seq)
            snap = read_snapshot(self.storage, self.root, seq)
            if snap is not None:
                out.append(snap)
        self._next_seq = max(self._next_seq, highest + 1)
        return sorted(out, key=lambda s: s.seq)

    def _restore(self) -> str | None:
        assert self.storage is not None
        for snap in reversed(self.snapshots()):
            dest = os.path.join(self.workdir, snap.rel)
            started = self._clock()
            local = item_at(dest, snap.rel)
            if local is not None and matches(dest, local, snap):
                size = 0
            else:
                try:
                    size = download(self.storage, snap, dest)
                except CheckpointError as exc:
                    self._events.emit(
                        CHECKPOINT_SKIPPED,
                        data={
                            "name": snap.rel,
                            "uri": snap.path,
                            "reason": self._clean(str(exc)),
                        },
                    )
                    continue
            after = item_at(dest, snap.rel)
            with self._lock:
                if after is not None:
                    self._done[snap.rel] = after.content
                self.restored = dest
                self.recognised = True
                self._restored_snapshot = snap
            self._events.emit(
                CHECKPOINT_RESTORED,
                data={
                    "name": snap.rel,
                    "path": dest,
                    "uri": snap.path,
                    "files": len(snap.files),
                    "bytes": size,
                    "duration_s": round(self._clock() - started, 3),
                },
            )
            return dest
        return None

    # --- mirror ----------------------------------------------------------------------------

    def stopping(self) -> None:
        """The runner is about to stop the stages (called on its thread, before the stop
        signal): one look that notes which versions are closed now, so that one complete
        before the signal is copied even if the job dies at once; then looks come faster
        until the stages are down. Never raises."""
        if self._thread is None or self._stopping.is_set():
            return
        self._stopping.set()
        try:
            self._look(every=True)
        except Exception:  # the stop must go on: the loop's next look reports a real problem
            pass

    def _loop(self) -> None:
        _yield_to_the_job()
        while not self._stop.wait(self._next_look()):
            try:
                self._pass()
                if self._runner is not None and self.advice.busy:
                    self.advice.look(self._runner, self.recognised)
            except Exception as exc:  # the thread must not die: report and go on
                self._report(f"checkpoint mirror: {self._describe(exc)}")

    def _next_look(self) -> float:
        """Seconds to the next look: soon after a new version appeared (its second look), and
        while the stages are being stopped; else the poll interval."""
        quick = self._stopping.is_set() or (self._changed and not self._quick)
        self._quick = quick  # one that keeps changing: every other look only
        return min(self._poll, QUICK_LOOK_S) if quick else self._poll

    def _look(self, every: bool = False) -> list[Item]:
        """One look at the paths: the items that are ready to copy (complete: closed, and the
        same as at the previous look; a directory for ``DIR_STILL_S``; or moved into place
        whole). ``every``: note which new versions are closed now, whether or not they are
        the same as before (the look at the stop)."""
        with self._look_lock:
            last_look, last_inodes = self._last_look, self._last_inodes
            now = self._wall()
            items = find_items(self.workdir, self.patterns)
            self._last_inodes = {i.rel: i.ino for i in items}
            self._last_look = now
            if items:
                self.recognised = True
            present = {i.rel for i in items}
            tables = (self._seen, self._since, self._pending, self._closed, self._holders)
            for table in (*tables, self._torn):
                for rel in [r for r in table if r not in present]:
                    del table[rel]
            candidates: list[tuple[Item, bool]] = []  # (item, ready if closed)
            self._changed = False
            for item in items:
                if self._done.get(item.rel) == item.content:
                    self._pending.pop(item.rel, None)
                    continue
                self._pending.setdefault(item.rel, now)
                since = self._since.get(item.rel)
                if since is None or since[0] != item.content:
                    self._since[item.rel] = since = (item.content, now)
                same = self._seen.get(item.rel) == item.content
                self._changed = self._changed or not same
                moved = item.renamed or _moved_in(item, last_look, last_inodes)
                still = now - since[1] >= (DIR_STILL_S if item.kind == "dir" else 0.0)
                if every or same or moved:
                    candidates.append((item, moved or (same and still)))
            for item in items:
                self._seen[item.rel] = item.content
            closed = self._closed_now(
                [i for i in items if self._done.get(i.rel) != i.content],
                [c[0] for c in candidates],
                now,
            )
            ready = []
            for item, complete in candidates:
                if item.rel not in closed:
                    self._closed.pop(item.rel, None)
                    continue
                self._closed[item.rel] = item.content
                if complete and not every:
                    ready.append(item)
            if not every:
                self._ready = ready
            return items

    def _closed_now(self, pending: list[Item], items: list[Item], now: float) -> set[str]:
        """The rels of ``items`` that no process of the job holds open for writing, unless a
        process that held one open at the previous look died since (its files were closed
        by its death, mid-write: that version is torn, whatever it looks like, and only an
        end of the stages on their own makes it complete). ``pending``: every item not
        mirrored as it is, whose writers are noted for the next look. Where open files
        cannot be seen (no procfs), those unchanged for ``checkpoints.settle``."""
        pids = process_tree(self._root_pid)
        if pids is None:
            return {i.rel for i in items if now - i.newest_mtime_ns / 1e9 >= self.settle_s}
        files = {i.rel: i.real_files(self.workdir) for i in pending}
        by_path = open_for_writing(set().union(set(), *files.values()), pids)
        for item in pending:
            holders = set().union(set(), *(by_path.get(p, set()) for p in files[item.rel]))
            before = self._holders.get(item.rel, set())
            if any(not alive(pid) for pid in before - holders):
                self._torn[item.rel] = item.content
            if holders:
                self._holders[item.rel] = holders
            else:
                self._holders.pop(item.rel, None)
        return {
            i.rel
            for i in items
            if i.rel not in self._holders and self._torn.get(i.rel) != i.content
        }

    def _pass(self) -> None:
        """A look, then a copy of each version ready; a warning for one that keeps changing
        and could not be copied for long."""
        self._look()
        with self._look_lock:
            ready, self._ready = self._ready, []
        for item in ready:
            if self._stop.is_set():
                return  # the stages are down: the last look (after_stages) takes over
            self._upload(item, self._last_look or self._wall())
        self._warn_stuck()

    def _warn_stuck(self) -> None:
        now = self._wall()
        with self._look_lock:
            stuck = [
                (rel, now - since)
                for rel, since in self._pending.items()
                if now - since >= self.advice.nothing_after_s and rel not in self._stuck
            ]
            self._stuck.update(rel for rel, _ in stuck)
        for rel, waited in stuck:
            self._warn(
                f"checkpoint {rel} has changed for {waited:.0f} s and none of its versions "
                "could be copied (it was never closed and unchanged between two looks, or it "
                "changed while it was copied): a new machine would resume from an older copy",
                {"name": rel, "after_s": round(waited, 1)},
            )

    def _warn(self, message: str, data: dict[str, Any]) -> None:
        message = self._clean(message)
        with self._lock:
            self.warning = message
        self._events.emit(CHECKPOINT_WARNING, data={"message": message, **data})

    def _final(self, runner: NodeRunner) -> None:
        """After the stages: copy every version that is complete and not up yet. Complete: it
        was seen closed at a look and has not changed since (the look at the stop included),
        or it was moved into place whole, or every stage ended on its own (exit 0 or 75:
        whatever the job wrote, it closed). A version written after the last look by a job
        that was killed (or died of the stop signal) may be torn: not copied."""
        clean = _stages_ended_cleanly(runner)
        with self._look_lock:
            closed = dict(self._closed)
            no_proc = process_tree(self._root_pid) is None
        items = find_items(self.workdir, self.patterns)
        if items:
            self.recognised = True
        now = self._wall()
        for item in items:
            if self._done.get(item.rel) == item.content:
                continue
            if no_proc:
                complete = now - item.newest_mtime_ns / 1e9 >= self.settle_s
            else:
                complete = closed.get(item.rel) == item.content or clean
            if complete or item.renamed:
                self._upload(item, now)

    def _steps(self) -> dict[str, int]:
        return stage_steps(self._runner) if self._runner is not None else {}

    def _upload(self, item: Item, settled_wall: float) -> None:
        assert self.storage is not None
        seq = self._next_seq
        self._next_seq += 1
        snap_dir = snapshot_dir(self.storage, self.root, seq)
        started = self._clock()
        path = os.path.join(self.workdir, item.rel)

        def unchanged() -> bool:
            again = item_at(path, item.rel)
            return again is not None and again.content == item.content

        try:
            files = write_snapshot(
                self.storage, snap_dir, self.workdir, item, self._wall, self._steps, unchanged
            )
        except Changed:
            return  # written (or deleted) meanwhile: looked at again when it settles
        done_wall = self._wall()
        size = sum(f["size"] for f in files.values())
        self._events.emit(
            CHECKPOINT_UPLOADED,
            data={
                "name": item.rel,
                "uri": snap_dir,
                "files": len(files),
                "bytes": size,
                "duration_s": round(self._clock() - started, 3),
                "lag_s": round(max(0.0, done_wall - settled_wall), 3),
            },
        )
        with self._look_lock:
            self._pending.pop(item.rel, None)
        with self._lock:
            self._done[item.rel] = item.content
            self.uploaded += 1
            self.last_uploaded = item.rel
            self.last_error = None
        self._retain()

    def _retain(self) -> None:
        """Keep the newest ``keep_last`` snapshots; drop the rest and stale partial ones."""
        assert self.storage is not None
        complete = self.snapshots()
        keep = {s.seq for s in complete[-self.keep_last :]}
        newest = max(keep, default=0)
        for seq in sequence_numbers(self.storage, self.root):
            if seq not in keep and seq < newest:
                quietly(self.storage.rmtree, snapshot_dir(self.storage, self.root, seq))

    # --- reporting -------------------------------------------------------------------------

    def _report(self, message: str) -> str:
        message = self._clean(message)
        with self._lock:
            repeated = message == self.last_error
            self.last_error = message
        if not repeated:
            self._events.emit(AGENT_ERROR, data={"hook": self.name, "message": message})
        return message

    @staticmethod
    def _describe(exc: BaseException) -> str:
        return str(exc) if isinstance(exc, CorralError) else f"{type(exc).__name__}: {exc}"

    def _clean(self, text: str) -> str:
        return redact(text, self._secrets)


def _moved_in(item: Item, last_look: float | None, last_inodes: Mapping[str, int]) -> bool:
    """The item was moved (renamed) into place since the previous look (wall time
    ``last_look``): its path held another inode then (writing in place keeps the inode), or
    none, yet its files were written before that look."""
    if last_look is None:
        return False
    was = last_inodes.get(item.rel)
    if was == item.ino:
        return False
    if was is not None:
        return True
    before = int(last_look * 1e9)
    return item.newest_mtime_ns <= before and item.dir_times[0] <= before


def _yield_to_the_job() -> None:
    """Lower this thread's CPU priority (Linux: a thread has a nice value of its own), so the
    copies (sha256, reads, writes) take the CPU the job leaves, rather than the job's."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), MIRROR_NICE)
    except (AttributeError, OSError):  # elsewhere, or not allowed: as it was
        pass


def _stages_ended_cleanly(runner: NodeRunner) -> bool:
    """Every stage that ran ended on its own: exit 0, or 75 (saved and stopped)."""
    try:
        stages = runner.status().get("stages") or []
    except Exception:  # no status: assume the worst
        return False
    codes = [s.get("exit_code") for s in stages if isinstance(s, dict)]
    return all(code in (None, 0, 75) for code in codes)
