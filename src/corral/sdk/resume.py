"""Exact resume: everything a training loop needs to continue as if it had never stopped.

:func:`training_state` gathers, in one dict: the model, optimizer, LR scheduler and AMP scaler
state dicts, the RNG states (python ``random``, numpy's global RNG, torch CPU and CUDA), the
data-loader position and the loop state (step, epoch, best metric, elapsed time, cost so far,
anything else in ``loop``) and the resolved config (by default the one ``load_config``
returned). :func:`restore_training_state` puts it all back and returns the loop information.
With fixed seeds, a run resumed from a checkpoint at step N/2 reaches step N with
bitwise-identical parameters to a run that never stopped, provided the data position is enough
to rebuild the data order (e.g. epoch + batch index with a seeded shuffle, or a sampler's
``state_dict()``).

RNG states are captured only for the libraries the script has imported (torch is never
imported here). numpy ``Generator`` objects the script owns are not global: put them in ``loop``
(they pickle). Works with plain Python / numpy state too: ``model`` may be a dict of arrays,
which :func:`restore_training_state` updates in place.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import warnings
from typing import Any

from corral.sdk import device_snapshot
from corral.sdk.manifest import CheckpointError

FORMAT = "corral.training_state"
VERSION = 1
LOOP_KEYS = ("step", "epoch", "data_position", "cost_usd", "elapsed_s", "best_metric", "loop")


def capture_rng_state() -> dict[str, Any]:
    """The global RNG states of python ``random``, numpy and torch (CPU, CUDA) as imported."""
    state: dict[str, Any] = {"python": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back RNG states from :func:`capture_rng_state` (missing parts are left alone)."""
    if not isinstance(state, dict):
        raise CheckpointError("RNG state must be a dict from capture_rng_state()")
    if "python" in state:
        random.setstate(_as_tuple(state["python"]))
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "torch" in state or "torch_cuda" in state:
        import torch

        if "torch" in state:
            # clone: set_rng_state reads the storage from its start, ignoring a view's offset
            torch.set_rng_state(state["torch"].cpu().clone())
        cuda = state.get("torch_cuda")
        if cuda is not None and torch.cuda.is_available():
            count = torch.cuda.device_count()
            if len(cuda) != count:
                warnings.warn(
                    f"checkpoint has CUDA RNG states for {len(cuda)} GPUs, this process sees "
                    f"{count}: restoring the first {min(len(cuda), count)}",
                    stacklevel=2,
                )
            for index, rng in enumerate(cuda[:count]):
                torch.cuda.set_rng_state(rng.cpu().clone(), index)


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


def _state_of(obj: Any) -> Any:
    return obj.state_dict() if obj is not None and hasattr(obj, "state_dict") else obj


def loaded_config() -> dict[str, Any] | None:
    """The config last returned by ``corral.sdk.load_config`` in this process, as a plain
    dict, or None (also when the config module was never imported: nothing was loaded)."""
    module = sys.modules.get("corral.sdk.config")
    return None if module is None else plain_config(module.last_loaded())


def plain_config(config: Any) -> Any:
    """``config`` as a plain dict to write into a checkpoint, credentials written as ``***``
    (:mod:`corral.sdk.config.masking`)."""
    from corral.sdk.config.masking import masked

    if config is None:
        return None
    if isinstance(config, dict):
        return masked(config)
    if hasattr(config, "to_dict"):
        return masked(config.to_dict())
    if hasattr(config, "model_dump"):
        return masked(config.model_dump())
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return masked(dataclasses.asdict(config))
    return config


def training_state(
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    *,
    step: int,
    epoch: int = 0,
    loop: dict[str, Any] | None = None,
    data_position: Any = None,
    cost_usd: Any = None,
    elapsed_s: float | None = None,
    best_metric: float | None = None,
    config: Any = None,
) -> dict[str, Any]:
    """The whole training state as one dict, ready for ``Checkpointer.save``.

    Objects with ``state_dict()`` (model, optimizer, scheduler, scaler, a sampler given as
    ``data_position``, a :class:`~corral.sdk.cost.CostMeter` given as ``cost_usd``) are saved by
    their state dict; ``model`` may also be a plain dict (e.g. numpy arrays). ``config`` is
    stored as a plain dict (``to_dict()``, pydantic ``model_dump()`` or ``dataclasses.asdict``);
    left out (None), it is the config last loaded by ``corral.sdk.load_config``, if any.
    Call it right before ``save``: the tensors are copied by the save, not here.
    """
    if hasattr(cost_usd, "cost_usd") and callable(cost_usd.cost_usd):
        cost_usd = cost_usd.cost_usd()
    if optimizer is not None and "torch" in sys.modules:
        device_snapshot.watch(optimizer)  # its tensors on a GPU: copied while the loop goes on
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": _state_of(model),
        "optimizer": _state_of(optimizer),
        "scheduler": _state_of(scheduler),
        "scaler": _state_of(scaler),
        "rng": capture_rng_state(),
        "step": int(step),
        "epoch": int(epoch),
        "loop": dict(loop or {}),
        "data_position": _state_of(data_position),
        "cost_usd": None if cost_usd is None else float(cost_usd),
        "elapsed_s": None if elapsed_s is None else float(elapsed_s),
        "best_metric": best_metric,
        "config": loaded_config() if config is None else plain_config(config),
    }


def _load_into(target: Any, saved: Any, what: str) -> None:
    if target is None:
        return
    if saved is None:
        raise CheckpointError(f"the checkpoint holds no {what} state to restore")
    if hasattr(target, "load_state_dict"):
        target.load_state_dict(saved)
    elif isinstance(target, dict) and isinstance(saved, dict):
        np: Any = sys.modules.get("numpy")
        for key, value in saved.items():
            current = target.get(key)
            same_array = (
                np is not None
                and isinstance(current, np.ndarray)
                and isinstance(value, np.ndarray)
                and current.shape == value.shape
                and current.flags.writeable
            )
            if same_array:
                np.copyto(current, value, casting="unsafe")
            else:
                target[key] = value
        for key in [k for k in target if k not in saved]:
            del target[key]
    else:
        raise CheckpointError(
            f"cannot restore the {what}: it has no load_state_dict() and is not a dict"
        )


def restore_training_state(
    state: dict[str, Any],
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
) -> dict[str, Any]:
    """Load a :func:`training_state` dict into the given objects and restore the RNG states.

    Returns the loop information: ``step``, ``epoch``, ``data_position``, ``cost_usd``,
    ``elapsed_s``, ``best_metric``, ``loop`` and ``config``. Continue at ``step + 1``.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError("not a training state written by corral.sdk.training_state()")
    if state.get("version", 0) > VERSION:
        raise CheckpointError(
            f"training state version {state.get('version')} is newer than this corral supports"
        )
    _load_into(model, state.get("model"), "model")
    _load_into(optimizer, state.get("optimizer"), "optimizer")
    _load_into(scheduler, state.get("scheduler"), "scheduler")
    _load_into(scaler, state.get("scaler"), "AMP scaler")
    if state.get("rng") is not None:
        restore_rng_state(state["rng"])  # last: loading above must not shift the streams
    info = {key: state.get(key) for key in LOOP_KEYS}
    info["loop"] = dict(info["loop"] or {})
    info["config"] = state.get("config")
    return info
