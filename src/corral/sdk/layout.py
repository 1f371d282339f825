"""The checkpoint directory: names, listing, and the crash-safe moves between states.

In ``root``, for a prefix ``ckpt`` (steps are integers without leading zeros)::

    ckpt-<step>.tmp/    being written (ignored by readers; removed by the next writer)
    ckpt-<step>/        a checkpoint, if it holds a valid COMPLETE manifest
    ckpt-<step>.old/    the previous copy of a step being replaced; a reader uses it only while
                        no ckpt-<step>/ exists (a crash between the two renames)
    ckpt-<step>.trash/  being deleted (ignored; removed by the next writer)

Deleting a step deletes every copy of it (a leftover ``.old`` first, the copy readers use last),
so a deleted checkpoint never comes back from a leftover.

With a storage whose rename is not atomic (object stores), nothing is renamed. The first save of
a step writes straight into ``ckpt-<step>/``, its files first and the manifest last. Saving a
step that exists (a re-save) never touches the existing copy while writing: it writes a new
version beside it::

    ckpt-<step>.v<k>/   version k (k >= 1; ckpt-<step>/ is version 0) of step <step>

Of the versions of a step, readers use the highest that holds a COMPLETE manifest. Only once the
new version's manifest is written are the older versions deleted (each manifest first), so a
crash at any point leaves the old or the new complete copy as the step, never neither. The next
writer's :meth:`Layout.cleanup` keeps the highest complete version of each step and deletes the
others (incomplete ones included). ``Found.path`` is the directory readers use; ``Found.name``
(``ckpt-<step>``) names the step, and :meth:`Layout.locate` resolves it to that directory.
Versions exist only on such storages: on a local disk ``ckpt-<step>.v<k>`` is no checkpoint name.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass

from corral.errors import BadInput, CorralError
from corral.sdk.manifest import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointLoadError,
    CheckpointWarning,
    Manifest,
    parse_manifest,
)
from corral.sdk.storage import Storage

_OLD = -1  # the rank of a .old copy: below every version


@dataclass(frozen=True)
class Found:
    step: int | None  # None: a directory given by path whose name carries no step
    name: str  # ckpt-<step> (the label in messages)
    path: str  # the directory (ckpt-<step>, ckpt-<step>.v<k>, or ckpt-<step>.old)


class Layout:
    def __init__(self, storage: Storage, root: str, prefix: str):
        self.storage, self.root, self.prefix = storage, root, prefix
        self._re = re.compile(
            rf"{re.escape(prefix)}-(0|[1-9][0-9]*)(\.tmp|\.old|\.trash|\.v[1-9][0-9]*)?"
        )

    def name(self, step: int) -> str:
        return f"{self.prefix}-{step}"

    def _parse(self, entry: str) -> tuple[int, str] | None:
        """``(step, suffix)`` of a directory name of this series, or None."""
        m = self._re.fullmatch(entry)
        if not m:
            return None
        suffix = m.group(2) or ""
        if suffix.startswith(".v") and self.storage.atomic_rename:
            return None  # versions are an object-store thing
        return int(m.group(1)), suffix

    def _copies(self, entries: list[str]) -> dict[int, list[tuple[int, str]]]:
        """Per step, its copies as ``(rank, entry)``, best first: the highest version first
        (``ckpt-<step>`` is version 0), ``.old`` last."""
        out: dict[int, list[tuple[int, str]]] = {}
        for entry in entries:
            parsed = self._parse(entry)
            if parsed is None or parsed[1] in (".tmp", ".trash"):
                continue
            step, suffix = parsed
            rank = _OLD if suffix == ".old" else int(suffix[2:]) if suffix else 0
            out.setdefault(step, []).append((rank, entry))
        for copies in out.values():
            copies.sort(reverse=True)
        return out

    def _listdir(self) -> list[str]:
        try:
            return self.storage.listdir(self.root)
        except PermissionError as exc:  # not "no checkpoints": restore() must not start afresh
            raise CheckpointLoadError(f"cannot list checkpoints in {self.root}: {exc}") from exc
        except OSError as exc:
            raise CheckpointError(f"cannot list checkpoints in {self.root}: {exc}") from exc

    def _complete(self, entry: str) -> bool:
        return self.storage.isfile(self.storage.join(self.root, entry, MANIFEST_NAME))

    def _current(self, copies: list[tuple[int, str]]) -> str:
        """The copy of a step that readers use (``copies`` best first)."""
        if len(copies) == 1 or self.storage.atomic_rename:
            return copies[0][1]  # local disk: ckpt-<step>/ whenever it exists, else .old
        for _, entry in copies:  # an interrupted re-save: the newest complete version
            if self._complete(entry):
                return entry
        return copies[0][1]  # none complete: reading it says so

    def scan(self) -> list[Found]:
        """Checkpoint directories by step (ascending), one per step: the copy readers use."""
        by_step = self._copies(self._listdir())
        return [
            Found(step, self.name(step), self.storage.join(self.root, self._current(copies)))
            for step, copies in sorted(by_step.items())
        ]

    def read_manifest(self, found: Found) -> tuple[Manifest, bytes]:
        path = self.storage.join(found.path, MANIFEST_NAME)
        try:
            raw = self.storage.read_bytes(path)
        except FileNotFoundError:
            raise CheckpointError(
                f"checkpoint {found.name} is incomplete (no COMPLETE manifest)"
            ) from None
        except PermissionError as exc:  # not corruption: restore() must not skip it
            raise CheckpointLoadError(
                f"checkpoint {found.name}: cannot read COMPLETE ({exc})"
            ) from exc
        except OSError as exc:
            raise CheckpointError(f"checkpoint {found.name}: cannot read COMPLETE ({exc})") from exc
        manifest = parse_manifest(raw, found.name)
        if found.step is not None and manifest.step != found.step:
            raise CheckpointError(
                f"checkpoint {found.name}: COMPLETE says step {manifest.step} (moved or renamed?)"
            )
        return manifest, raw

    def locate(self, text: str) -> Found:
        """A checkpoint given by path, or by name inside the root. The name (``ckpt-<step>``,
        or the name of one of its copies) or the path in the root of any copy of a step means
        the copy of that step readers use (``.old`` after an interrupted replace, the newest
        complete version on an object store): a ``CheckpointInfo.path`` from before a re-save
        finds the new copy, also while the old one is still there or half deleted. Any other
        directory is read as it is."""
        st = self.storage
        base = os.path.basename(text.rstrip("/"))
        parsed = self._parse(base)
        if (
            parsed is not None
            and parsed[1] not in (".tmp", ".trash")
            and text.rstrip("/") in (base, st.join(self.root, base))
            and (found := self._step(parsed[0])) is not None
        ):
            return found
        for candidate in (text, st.join(self.root, text)):
            try:
                is_dir = st.isdir(candidate)
            except BadInput:  # e.g. a bare name given to an object store: not a path there
                continue
            if is_dir:
                base = os.path.basename(candidate.rstrip("/"))
                parsed = self._parse(base)
                if parsed is not None and parsed[1] not in (".tmp", ".trash"):
                    return Found(parsed[0], self.name(parsed[0]), candidate)
                return Found(None, base, candidate)  # any directory holding a checkpoint
        raise CheckpointError(f"checkpoint {text} does not exist")

    def relocate(self, found: Found) -> Found | None:
        """The copy of ``found``'s step that readers use now, when ``found`` is a copy in the
        root that no longer is (the writer replaced it since it was found); else None."""
        entry = os.path.basename(found.path.rstrip("/"))
        parsed = self._parse(entry)
        if (
            found.step is None
            or parsed is None
            or parsed[0] != found.step
            or found.path.rstrip("/") != self.storage.join(self.root, entry)
        ):
            return None
        now = self._step(found.step)
        return now if now is not None and now.path != found.path else None

    def _step(self, step: int) -> Found | None:
        return next((f for f in self.scan() if f.step == step), None)

    # --- writing (one writer process per directory) ---------------------------------------

    def cleanup(self) -> None:
        """Remove what a crashed writer left: .tmp/.trash dirs; finish interrupted replaces
        (an object store: keep the newest complete version of each step, delete the rest)."""
        st = self.storage
        st.makedirs(self.root)
        entries = st.listdir(self.root)
        for entry in entries:
            parsed = self._parse(entry)
            if parsed is None:
                continue
            step, suffix = parsed
            path = st.join(self.root, entry)
            final = st.join(self.root, self.name(step))
            if suffix in (".tmp", ".trash"):
                st.rmtree(path)
            elif suffix == ".old" and st.atomic_rename:
                if st.isdir(final):
                    st.rmtree(path)
                else:
                    st.rename(path, final)
                    st.fsync_dir(self.root)
        if st.atomic_rename:
            return
        for step, copies in self._copies(entries).items():
            keep = next((e for _, e in copies if self._complete(e)), None)
            for _, entry in copies:
                if entry != keep:  # incomplete, or an older version of a complete step
                    self._delete(st.join(self.root, entry), self.name(step))

    def begin(self, step: int) -> tuple[str, str]:
        """An empty directory to write checkpoint ``step`` into, and its path once published
        (the same directory on an object store, where it is written in place)."""
        st = self.storage
        final = st.join(self.root, self.name(step))
        if st.atomic_rename:
            work = final + ".tmp"
            st.rmtree(work)
            st.makedirs(work)
            return work, final
        # No atomic rename: write in place, a version above every existing copy of the step
        # (the manifest, written last, makes it the step); publish() deletes the older ones.
        ranks = [rank for rank, _ in self._copies(self._listdir()).get(step, []) if rank != _OLD]
        if ranks:
            final = f"{final}.v{max(ranks) + 1}"
        st.makedirs(final)
        return final, final

    def publish(self, work: str, final: str) -> None:
        """Make a finished ``work`` directory (manifest written and fsynced) the checkpoint;
        then remove the step's previous copy. If it fails before ``work`` is in place, ``work``
        is removed; the previous copy stays the step."""
        st = self.storage
        if not st.atomic_rename:
            self._drop_older(final)
            return
        old = final + ".old"
        try:
            if st.isdir(final):
                st.rmtree(old)  # a stale one (final is what readers use)
                st.rename(final, old)  # readers fall back to .old until the new one is in place
            st.rename(work, final)
        except BaseException:
            st.rmtree(work)
            raise
        st.fsync_dir(self.root)
        st.rmtree(old)  # also one left by an earlier replace that failed

    def _drop_older(self, final: str) -> None:
        """Object store: delete the copies of the step that ``final`` (complete) replaces. A
        failure only warns: the save is complete and the new copy is the one readers use; the
        next writer's cleanup (or deleting the step) removes what is left."""
        entry = os.path.basename(final.rstrip("/"))
        parsed = self._parse(entry)
        if parsed is None:
            return
        try:
            for _, other in self._copies(self._listdir()).get(parsed[0], []):
                if other != entry:
                    self._delete(self.storage.join(self.root, other), self.name(parsed[0]))
        except (OSError, CorralError) as exc:
            warnings.warn(
                f"checkpoint {self.name(parsed[0])} is saved in {entry}, but its previous copy "
                f"could not be deleted yet ({exc}); the next writer deletes it",
                CheckpointWarning,
                stacklevel=2,
            )

    def drop(self, found: Found) -> None:
        """Delete a checkpoint, every copy of its step, so that no reader ever sees it
        half-deleted and no leftover copy (a stale ``.old``, an older version) takes its place:
        the other copies go first, the one readers use last."""
        st = self.storage
        current = os.path.basename(found.path.rstrip("/"))
        if found.step is not None:
            for _, other in self._copies(self._listdir()).get(found.step, []):
                if other != current:
                    self._delete(st.join(self.root, other), found.name)
        self._delete(found.path, found.name)

    def _delete(self, path: str, name: str) -> None:
        """Delete one copy of checkpoint ``name``: renamed to ``<name>.trash`` first where
        rename is atomic, else its manifest first (never a half-deleted checkpoint)."""
        st = self.storage
        if st.atomic_rename:
            if not st.isdir(path):
                return
            trash = st.join(self.root, name + ".trash")
            st.rmtree(trash)
            st.rename(path, trash)
            st.rmtree(trash)
        else:
            st.remove(st.join(path, MANIFEST_NAME))
            st.rmtree(path)
