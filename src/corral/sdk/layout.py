"""The checkpoint directory: names, listing, and the crash-safe moves between states.

In ``root``, for a prefix ``ckpt`` (steps are integers without leading zeros)::

    ckpt-<step>.tmp/    being written (ignored by readers; removed by the next writer)
    ckpt-<step>/        a checkpoint, if it holds a valid COMPLETE manifest
    ckpt-<step>.old/    the previous copy of a step being replaced; a reader uses it only while
                        no ckpt-<step>/ exists (a crash between the two renames)
    ckpt-<step>.trash/  being deleted (ignored; removed by the next writer)

With a storage whose rename is not atomic (object stores), nothing is renamed: files are written
straight into ``ckpt-<step>/`` with the manifest last, and deleting removes the manifest first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from corral.sdk.manifest import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointLoadError,
    Manifest,
    parse_manifest,
)
from corral.sdk.storage import Storage


@dataclass(frozen=True)
class Found:
    step: int | None  # None: a directory given by path whose name carries no step
    name: str  # ckpt-<step> (the label in messages)
    path: str  # the directory (ckpt-<step>, or ckpt-<step>.old after an interrupted replace)


class Layout:
    def __init__(self, storage: Storage, root: str, prefix: str):
        self.storage, self.root, self.prefix = storage, root, prefix
        self._re = re.compile(rf"{re.escape(prefix)}-(0|[1-9][0-9]*)(\.tmp|\.old|\.trash)?")

    def name(self, step: int) -> str:
        return f"{self.prefix}-{step}"

    def scan(self) -> list[Found]:
        """Checkpoint directories by step (ascending); ``.old`` only where no final exists."""
        by_step: dict[int, Found] = {}
        try:
            entries = self.storage.listdir(self.root)
        except PermissionError as exc:  # not "no checkpoints": restore() must not start afresh
            raise CheckpointLoadError(f"cannot list checkpoints in {self.root}: {exc}") from exc
        except OSError as exc:
            raise CheckpointError(f"cannot list checkpoints in {self.root}: {exc}") from exc
        for entry in entries:
            m = self._re.fullmatch(entry)
            if not m or m.group(2) in (".tmp", ".trash"):
                continue
            step = int(m.group(1))
            if m.group(2) == ".old" and step in by_step:
                continue
            by_step[step] = Found(step, self.name(step), self.storage.join(self.root, entry))
        return [by_step[s] for s in sorted(by_step)]

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
        """A checkpoint given by path, or by name inside the root."""
        st = self.storage
        for candidate in (text, st.join(self.root, text)):
            if st.isdir(candidate):
                base = os.path.basename(candidate.rstrip("/"))
                m = self._re.fullmatch(base)
                if m and m.group(2) in (None, ".old"):
                    step = int(m.group(1))
                    return Found(step, self.name(step), candidate)
                return Found(None, base, candidate)  # any directory holding a checkpoint
        raise CheckpointError(f"checkpoint {text} does not exist")

    # --- writing (one writer process per directory) ---------------------------------------

    def cleanup(self) -> None:
        """Remove what a crashed writer left: .tmp/.trash dirs; finish interrupted replaces."""
        st = self.storage
        st.makedirs(self.root)
        for entry in st.listdir(self.root):
            m = self._re.fullmatch(entry)
            if not m:
                continue
            path = st.join(self.root, entry)
            final = st.join(self.root, self.name(int(m.group(1))))
            if m.group(2) in (".tmp", ".trash"):
                st.rmtree(path)
            elif m.group(2) == ".old":
                if st.isdir(final):
                    st.rmtree(path)
                else:
                    st.rename(path, final)
                    st.fsync_dir(self.root)
            elif not st.atomic_rename and not st.isfile(st.join(path, MANIFEST_NAME)):
                st.rmtree(path)  # an interrupted in-place write

    def begin(self, step: int) -> tuple[str, str]:
        """An empty directory to write checkpoint ``step`` into, and its final path."""
        st = self.storage
        final = st.join(self.root, self.name(step))
        if st.atomic_rename:
            work = final + ".tmp"
            st.rmtree(work)
        else:  # no atomic rename: write in place; the manifest written last makes it exist
            self.drop(Found(step, self.name(step), final))
            work = final
        st.makedirs(work)
        return work, final

    def publish(self, work: str, final: str) -> None:
        """Move a finished ``work`` directory (manifest written and fsynced) into place."""
        st = self.storage
        if not st.atomic_rename:
            return  # written in place
        if st.isdir(final):
            old = final + ".old"
            st.rmtree(old)
            st.rename(final, old)  # readers fall back to .old until the new one is in place
            st.rename(work, final)
            st.fsync_dir(self.root)
            st.rmtree(old)
        else:
            st.rename(work, final)
            st.fsync_dir(self.root)

    def drop(self, found: Found) -> None:
        """Delete a checkpoint so that no reader ever sees it half-deleted."""
        st = self.storage
        if st.atomic_rename:
            if not st.isdir(found.path):
                return
            trash = st.join(self.root, found.name + ".trash")
            st.rmtree(trash)
            st.rename(found.path, trash)
            st.rmtree(trash)
        else:
            st.remove(st.join(found.path, MANIFEST_NAME))
            st.rmtree(found.path)
