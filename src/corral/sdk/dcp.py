"""Interoperating with ``torch.distributed.checkpoint`` (DCP).

* **Reading a DCP checkpoint**: ``Checkpointer.restore(path)`` of a DCP directory (it holds
  a ``.metadata`` file) or :func:`load_dcp`. With a ``template`` (a state whose tensors and
  DTensors have the shapes and shardings wanted) DCP loads into the template's tensors in
  place, resharding as it does (every rank calls it); without one the whole state comes back
  as full tensors in this process (DCP's own ``dcp_to_torch_save`` way). DCP files carry no
  sha256: corral cannot verify them.
* **Writing one on request**: :func:`save_dcp` writes a state (DTensors included) as a DCP
  checkpoint; :func:`export_dcp` writes a corral checkpoint (verified as it is restored) as
  one, for tools that read DCP.

torch is imported only when these are called.
"""

from __future__ import annotations

import os
from typing import Any

from corral.errors import BadInput
from corral.sdk.manifest import CheckpointLoadError

#: DCP's metadata file: a directory holding it is a DCP checkpoint.
METADATA_FILE = ".metadata"


def is_dcp_checkpoint(path: str | os.PathLike[str]) -> bool:
    try:
        return os.path.isfile(os.path.join(os.fspath(path), METADATA_FILE))
    except (TypeError, ValueError):
        return False


def load_dcp(path: str | os.PathLike[str], template: Any = None) -> Any:
    """The state of the DCP checkpoint at ``path``: loaded into ``template`` (returned) when
    given, else rebuilt whole with full tensors (no process group needed)."""
    import torch.distributed.checkpoint as dcp

    path = os.fspath(path)
    if not is_dcp_checkpoint(path):
        raise BadInput(f"{path} is not a torch.distributed.checkpoint directory (no .metadata)")
    try:
        if template is not None:
            dcp.load(template, checkpoint_id=path, no_dist=_no_group())
            return template
        from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        state: dict[str, Any] = {}
        _load_state_dict(
            state,
            storage_reader=dcp.FileSystemReader(path),
            planner=_EmptyStateDictLoadPlanner(),
            no_dist=True,
        )
        return state
    except CheckpointLoadError:
        raise
    except Exception as exc:  # DCP's errors are many kinds: one line naming the directory
        raise CheckpointLoadError(
            f"DCP checkpoint {path} cannot be loaded: {type(exc).__name__}: {exc}"
        ) from exc


def _no_group() -> bool:
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized())


def save_dcp(state: Any, path: str | os.PathLike[str]) -> str:
    """Write ``state`` as a DCP checkpoint into ``path`` (every rank calls it in a distributed
    job, as ``dcp.save``). Returns the path."""
    import torch.distributed.checkpoint as dcp

    path = os.fspath(path)
    dcp.save(state, checkpoint_id=path, no_dist=_no_group())
    return path


def export_dcp(
    checkpointer: Any,
    target: str | os.PathLike[str],
    path: Any = None,
    *,
    template: Any = None,
) -> str:
    """Write the corral checkpoint ``path`` (a path, name or ``CheckpointInfo``; default: the
    newest valid one) of ``checkpointer`` (a :class:`~corral.sdk.Checkpointer`) as a DCP checkpoint into ``target``; with a ``template`` each rank writes
    its part of the DTensors (restored sharded like the template's)."""
    state = checkpointer.restore(path, template=template)
    if state is None:
        raise BadInput(f"no valid checkpoint in {checkpointer.dir} to export")
    return save_dcp(state, target)
