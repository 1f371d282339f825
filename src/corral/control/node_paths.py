"""Where a run's files are on its node, and the names of the code-shipping events: what a
reader of one run (``corral status``) needs without the planner, the providers or the
shipping machinery behind it."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

from corral import paths

if TYPE_CHECKING:
    from corral.providers.base import NodeProfile
    from corral.spec import JobSpec

#: the controller packed the run's code (data: source, sha256, bytes, members, commit, ...)
PACKED = "code.packed"
#: the packed code is in the run's storage (data: uri, bytes)
UPLOADED = "code.uploaded"
#: the code went to a node over its agent (data: bytes, seconds)
SENT = "code.sent"


def checkpoint_dir(spec: JobSpec, run_id: str, profile: NodeProfile | None = None) -> str:
    """The checkpoint directory on the node: the node's own (``profile.checkpoint_dir``: a
    persistent volume, say), else ``checkpoints.dir`` (relative to the workdir), else one per
    run under CORRAL_HOME (stable across attempts)."""
    chosen = spec.checkpoints.dir if spec.checkpoints else None
    return checkpoint_dir_of(chosen, str(spec.workdir), run_id, profile)


def checkpoint_dir_of(
    chosen: str | None, workdir: str, run_id: str, profile: NodeProfile | None = None
) -> str:
    """:func:`checkpoint_dir` from the spec's ``checkpoints.dir`` and ``workdir`` alone (a
    stored spec, read without validating it again)."""
    if profile is not None and profile.checkpoint_dir:
        return profile.checkpoint_dir
    node_workdir = profile.workdir if profile is not None else None
    if node_workdir:  # a node of its own: its paths, never this machine's
        if chosen:
            return posixpath.join(node_workdir, chosen)
        return posixpath.join(posixpath.dirname(node_workdir.rstrip("/")), "checkpoints")
    if chosen:
        p = Path(chosen)
        return str(p if p.is_absolute() else Path(workdir) / p)
    return str(paths.run_dir(run_id) / "checkpoints")
