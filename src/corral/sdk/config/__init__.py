"""Typed training configs: a dataclass, experiment files, ``--set key=value`` overrides.

A config is a dataclass that subclasses :class:`TrainingConfig`; every field needs a default
(nested dataclasses via ``field(default_factory=...)``)::

    @dataclass
    class Model:
        layers: int = 2

    @dataclass
    class Config(TrainingConfig):
        lr: float = 1e-3
        model: Model = field(default_factory=Model)

    cfg = load_config(Config, argv=sys.argv[1:])  # --experiment small --set model.layers=4

Resolution order (later wins): the dataclass defaults, then the experiment file, then
``overrides=``, then ``--set`` items from ``argv``.

**Experiment files** live in ``configs/experiments/<name>.py`` (``experiments_dir=`` changes the
folder; ``experiment=`` may also be a path to a ``.py`` file). One may define either or both of:

* ``overrides = {"lr": 3e-4, "model.layers": 4}``: dotted keys, Python values (or strings,
  parsed like ``--set``), applied first;
* ``def configure(cfg): ...``: called with the config, may change it in place or return a new
  one; the result is type-checked like every other value.

**Values** are checked against the field types: ``int`` (also a whole number in scientific
notation, ``1e5``, but not ``3e-4``), ``float`` (an int is fine), ``bool``
(``true/false/yes/no/on/off/1/0``), ``str``, ``Path``, ``Optional[X]`` (``none``/``null``),
unions (tried in order), ``list[X]``/``tuple[X, ...]`` (a JSON array or ``a,b,c``),
``dict[str, X]`` (a JSON object), ``Literal[...]``, enums (by name or value) and nested
dataclasses (``model.layers=4``, or ``model={"layers": 4}``). An unknown key or a wrong type is a
:class:`corral.errors.BadInput` naming the key, with a "did you mean" suggestion. Each field's
type is resolved on its own; one that cannot be resolved (a type defined inside a function
under ``from __future__ import annotations``) is a ``BadInput`` naming the field, never "any".

A config or section class with a ``__post_init__`` is built again from the final values once
they are all applied, so what it derives (``field(init=False)``, which cannot be set itself) or
checks sees the overrides; an error it raises is a ``BadInput``. In ``configure()``, assigning
a name that is not a field (``cfg.lrr = ...``) or raising is a ``BadInput`` naming the
experiment.

**Where the resolved config goes**: ``load_config`` writes it as JSON to
:func:`config_path` (``$CORRAL_CHECKPOINT_DIR/../config.json`` under corral, else
``./corral-run/config.json``; from rank 0 only, see :func:`is_rank_zero`), and every
checkpoint carries it: ``training_state(...)`` without ``config=`` stores the config last loaded
(:func:`last_loaded`), and the HF callback writes ``corral_config.json`` into each checkpoint.
What is written has credentials masked as ``***`` (:mod:`corral.sdk.config.masking`).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from corral.errors import BadInput
from corral.files import write_json_atomic
from corral.sdk.config.masking import masked
from corral.sdk.config.values import (
    check_all,
    check_types,
    default_instance,
    finalize,
    plain,
    set_key,
    suggest,
)
from corral.wire.env import ENV_CHECKPOINT_DIR

__all__ = [
    "TrainingConfig",
    "apply_overrides",
    "config_path",
    "is_rank_zero",
    "last_loaded",
    "load_config",
    "parse_argv",
    "run_dir",
]

C = TypeVar("C", bound="TrainingConfig")


def run_dir() -> Path:
    """This run's directory: the parent of ``$CORRAL_CHECKPOINT_DIR`` when corral runs the
    script, else ``./corral-run`` (not created here)."""
    ckpt = os.environ.get(ENV_CHECKPOINT_DIR)
    if ckpt:
        return Path(ckpt).expanduser().resolve().parent
    return Path.cwd() / "corral-run"


def is_rank_zero(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``RANK`` (else ``LOCAL_RANK``), as torchrun/accelerate set them, names a
    process other than rank 0; True otherwise (also outside distributed training)."""
    env = os.environ if environ is None else environ
    for name in ("RANK", "LOCAL_RANK"):
        raw = (env.get(name) or "").strip()
        if raw:
            try:
                return int(raw) == 0
            except ValueError:
                continue
    return True


def config_path() -> Path:
    """Where ``load_config`` saves the resolved config: ``run_dir() / "config.json"``."""
    return run_dir() / "config.json"


@dataclasses.dataclass
class TrainingConfig:
    """Base class of a training config; subclass it as a ``@dataclass`` with typed fields."""

    def to_dict(self) -> dict[str, Any]:
        return plain(self)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the config as JSON, atomically: a temporary file with a name of its own (so
        several processes may save at once, the last rename wins), then a rename. Credentials
        are written as ``***`` (:mod:`corral.sdk.config.masking`)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = masked(self.to_dict())
        write_json_atomic(target, data, indent=2, sort_keys=True, newline=True, mode=0o644)
        return target

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Build a config from a (possibly partial) dict such as ``to_dict()`` wrote; unknown
        keys and wrong types are :class:`BadInput`."""
        cfg = default_instance(cls)
        for key, value in data.items():
            set_key(cfg, key, value, parse_text=False)
        return finalize(cfg)


def apply_overrides(cfg: C, overrides: Iterable[str] | dict[str, Any]) -> C:
    """A copy of ``cfg`` with ``["lr=3e-4", "model.layers=4"]`` (strings, parsed) or
    ``{"lr": 3e-4}`` (Python values) applied; ``cfg`` itself is left unchanged. A config (or
    section) with a ``__post_init__`` is built again from the new values, so what it derives
    or checks there follows the overrides."""
    return finalize(_apply(copy.deepcopy(cfg), overrides))


def _apply(out: C, overrides: Iterable[str] | dict[str, Any]) -> C:
    """``overrides`` set on ``out`` itself (no copy, no ``__post_init__``)."""
    if isinstance(overrides, dict):
        for key, value in overrides.items():
            set_key(out, str(key), value, parse_text=isinstance(value, str))
        return out
    for item in overrides:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise BadInput(f"override {item!r}: expected KEY=VALUE, e.g. lr=3e-4")
        set_key(out, key.strip(), value, parse_text=True)
    return out


def parse_argv(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """``(experiment, overrides)`` from ``--experiment NAME`` and ``--set K=V`` items (also
    ``--experiment=NAME``/``--set=K=V``); other items are left for the script's own parser."""
    experiment: str | None = None
    sets: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        for flag in ("--experiment", "--set"):
            if arg == flag:
                if i + 1 >= len(items):
                    raise BadInput(f"{flag} needs a value")
                value = items[i + 1]
                i += 1
            elif arg.startswith(flag + "="):
                value = arg[len(flag) + 1 :]
            else:
                continue
            if flag == "--set":
                sets.append(value)
            else:
                experiment = value
            break
        i += 1
    return experiment, sets


def _experiment_file(name: str, experiments_dir: str | os.PathLike[str]) -> Path:
    path = Path(name)
    if path.suffix == ".py":
        if not path.is_file():
            raise BadInput(f"experiment file {path} does not exist")
        return path
    folder = Path(experiments_dir)
    path = folder / f"{name}.py"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.py")) if folder.is_dir() else []
        hint = suggest(name, known) or (f" (known: {', '.join(known)})" if known else "")
        raise BadInput(f"experiment '{name}' not found: no {path}{hint}")
    return path


def _apply_experiment(cfg: C, name: str, experiments_dir: str | os.PathLike[str]) -> C:
    path = _experiment_file(name, experiments_dir)
    spec = importlib.util.spec_from_file_location(f"corral_experiment_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise BadInput(f"experiment file {path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    # registered like an imported module: dataclasses (and type hints) defined in the file
    # look their module up in sys.modules
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise BadInput(f"experiment file {path} failed to load: {type(e).__name__}: {e}") from e
    overrides = getattr(module, "overrides", None)
    configure = getattr(module, "configure", None)
    if overrides is None and configure is None:
        raise BadInput(f"experiment file {path} defines neither 'overrides' nor 'configure'")
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise BadInput(f"experiment file {path}: 'overrides' must be a dict")
        try:
            cfg = _apply(copy.deepcopy(cfg), overrides)
        except BadInput as e:
            raise BadInput(f"experiment '{name}': {e}") from None
    if configure is not None:
        before = _extra_attributes(cfg)
        try:
            result = configure(cfg)
        except BadInput as e:
            raise BadInput(f"experiment '{name}': configure(): {e}") from e
        except Exception as e:
            raise BadInput(
                f"experiment '{name}': configure() failed: {type(e).__name__}: {e}"
            ) from e
        if result is not None:
            if not isinstance(result, type(cfg)):
                raise BadInput(f"experiment '{name}': configure() returned {type(result)!r}")
            cfg = result
        for key, options in _extra_attributes(cfg).items():
            if key not in before:  # `cfg.lrr = 1`: a typo dataclasses would keep silently
                raise BadInput(
                    f"experiment '{name}': configure() set unknown config key "
                    f"'{key}'{suggest(key, options)}"
                )
        try:
            check_all(cfg)
        except BadInput as e:
            raise BadInput(f"experiment '{name}': {e}") from None
    return cfg


def _extra_attributes(cfg: Any, prefix: str = "") -> dict[str, list[str]]:
    """``{"model.lyers": [the keys of that section], ...}``: the attributes of ``cfg`` and its
    sections that are not fields."""
    out: dict[str, list[str]] = {}
    names = [f.name for f in dataclasses.fields(cfg)]
    for attr in getattr(cfg, "__dict__", {}):
        if attr not in names:
            out[prefix + attr] = [prefix + n for n in names]
    for name in names:
        value = getattr(cfg, name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(_extra_attributes(value, f"{prefix}{name}."))
    return out


def load_config(
    cls: type[C],
    *,
    experiment: str | None = None,
    overrides: Iterable[str] | dict[str, Any] = (),
    argv: Sequence[str] | None = None,
    experiments_dir: str | os.PathLike[str] = "configs/experiments",
    save: bool = True,
) -> C:
    """The resolved config: defaults, experiment, ``overrides``, then ``argv``'s ``--set``
    (``--experiment`` in ``argv`` replaces ``experiment=``). Saved to :func:`config_path`
    unless ``save=False`` or this is not rank 0 (:func:`is_rank_zero`)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise BadInput(f"load_config needs a dataclass type, got {cls!r}")
    check_types(cls)  # a field whose type cannot be resolved is an error now, not "any"
    argv_sets: list[str] = []
    if argv is not None:
        argv_experiment, argv_sets = parse_argv(argv)
        experiment = argv_experiment or experiment
    cfg = default_instance(cls)
    if experiment:
        cfg = _apply_experiment(cfg, experiment, experiments_dir)
    cfg = _apply(copy.deepcopy(cfg), overrides)
    cfg = finalize(_apply(cfg, argv_sets))  # __post_init__ once, on the final values
    if save and is_rank_zero():  # one writer: with DDP every rank loads the config
        if not hasattr(cfg, "save"):
            raise BadInput(f"{cls.__name__} must subclass TrainingConfig to be saved")
        cfg.save(config_path())
    global _last_loaded
    _last_loaded = copy.deepcopy(cfg)
    return cfg


_last_loaded: Any = None


def last_loaded() -> Any:
    """A copy of the config most recently returned by :func:`load_config` in this process, or
    None. ``training_state(config=None)`` and the HF callback put it into every checkpoint."""
    return copy.deepcopy(_last_loaded)
