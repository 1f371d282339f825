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

**Values** are checked against the field types: ``int``, ``float`` (an int is fine), ``bool``
(``true/false/yes/no/on/off/1/0``), ``str``, ``Path``, ``Optional[X]`` (``none``/``null``),
unions (tried in order), ``list[X]``/``tuple[X, ...]`` (a JSON array or ``a,b,c``),
``dict[str, X]`` (a JSON object), ``Literal[...]``, enums (by name or value) and nested
dataclasses (``model.layers=4``, or ``model={"layers": 4}``). An unknown key or a wrong type is a
:class:`corral.errors.BadInput` naming the key, with a "did you mean" suggestion.

**Where the resolved config goes**: ``load_config`` writes it as JSON to
:func:`config_path` (``$CORRAL_CHECKPOINT_DIR/../config.json`` under corral, else
``./corral-run/config.json``), and the checkpoint carries it when the script passes
``config=cfg.to_dict()`` to ``training_state(...)``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import enum
import importlib.util
import json
import os
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from corral.constants import ENV_CHECKPOINT_DIR
from corral.errors import BadInput

__all__ = [
    "TrainingConfig",
    "apply_overrides",
    "config_path",
    "load_config",
    "parse_argv",
    "run_dir",
]

C = TypeVar("C", bound="TrainingConfig")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null"}


def run_dir() -> Path:
    """This run's directory: the parent of ``$CORRAL_CHECKPOINT_DIR`` when corral runs the
    script, else ``./corral-run`` (not created here)."""
    ckpt = os.environ.get(ENV_CHECKPOINT_DIR)
    if ckpt:
        return Path(ckpt).expanduser().resolve().parent
    return Path.cwd() / "corral-run"


def config_path() -> Path:
    """Where ``load_config`` saves the resolved config: ``run_dir() / "config.json"``."""
    return run_dir() / "config.json"


@dataclasses.dataclass
class TrainingConfig:
    """Base class of a training config; subclass it as a ``@dataclass`` with typed fields."""

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the config as JSON (atomically: a temporary file, then a rename)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, target)
        return target

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Build a config from a (possibly partial) dict such as ``to_dict()`` wrote; unknown
        keys and wrong types are :class:`BadInput`."""
        cfg = _default(cls)
        for key, value in data.items():
            _set(cfg, key, value, parse_text=False)
        return cfg


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _default(cls: type[C]) -> C:
    try:
        return cls()
    except TypeError as e:
        raise BadInput(f"{cls.__name__}: every config field needs a default ({e})")


def _hints(obj: Any) -> dict[str, Any]:
    cls = type(obj)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls)}


def _suggest(word: str, options: Iterable[str]) -> str:
    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{found[0]}'?)" if found else ""


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


class _Mismatch(Exception):
    """A value does not fit a type (message: what was expected)."""


def _coerce(value: Any, tp: Any, parse_text: bool) -> Any:
    """``value`` converted to ``tp``; strings are parsed when ``parse_text`` (CLI input)."""
    if tp is Any or tp is object or isinstance(tp, (str, typing.ForwardRef)):
        return _parse_json_or_text(value) if parse_text and isinstance(value, str) else value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _coerce(value, args[0], parse_text)
    if origin in (typing.Union, types.UnionType):
        is_none = value is None or (
            parse_text and isinstance(value, str) and value.strip().lower() in _NONE
        )
        if is_none and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, parse_text)
            except _Mismatch:
                continue
        raise _Mismatch(_type_name(tp))
    if origin is typing.Literal:
        for option in args:
            if value == option or (isinstance(value, str) and str(option) == value):
                return option
        raise _Mismatch("one of " + ", ".join(repr(a) for a in args))
    if origin in (list, tuple, set, frozenset, Sequence):
        items = _as_list(value, parse_text)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(items) != len(args):
                raise _Mismatch(f"{len(args)} items")
            return tuple(_coerce(v, a, parse_text) for v, a in zip(items, args, strict=True))
        item_tp = args[0] if args else Any
        out = [_coerce(v, item_tp, parse_text) for v in items]
        return out if origin in (list, Sequence) else origin(out)
    if origin is dict:
        if parse_text and isinstance(value, str):
            value = _json(value, "a JSON object")
        if not isinstance(value, dict):
            raise _Mismatch("a JSON object")
        kt, vt = args if args else (Any, Any)
        return {_coerce(k, kt, True): _coerce(v, vt, parse_text) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if parse_text and isinstance(value, str):
            value = _json(value, "a JSON object")
        if not isinstance(value, dict):
            raise _Mismatch(f"{tp.__name__} (a JSON object of its fields)")
        obj = _default(tp)
        for k, v in value.items():
            _set(obj, k, v, parse_text)
        return obj
    if isinstance(tp, type):
        return _scalar(value, tp, parse_text)
    return value


def _scalar(value: Any, tp: type, parse_text: bool) -> Any:
    text = value.strip() if parse_text and isinstance(value, str) else None
    if tp is bool:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise _Mismatch("a boolean (true/false)")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text is not None:
            try:
                return int(text)
            except ValueError:
                pass
        raise _Mismatch("an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if text is not None:
            try:
                return float(text)
            except ValueError:
                pass
        raise _Mismatch("a number")
    if tp is str:
        if isinstance(value, str):
            if parse_text and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
                return text[1:-1]
            return value
        raise _Mismatch("a string")
    if issubclass(tp, enum.Enum):
        for member in tp:
            if value is member or value == member.value or value == member.name:
                return member
            if isinstance(value, str) and str(member.value) == value:
                return member
        raise _Mismatch("one of " + ", ".join(m.name for m in tp))
    if issubclass(tp, os.PathLike) or tp is Path:
        if isinstance(value, (str, os.PathLike)):
            return tp(value)
        raise _Mismatch("a path")
    if isinstance(value, tp):
        return value
    raise _Mismatch(tp.__name__)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise _Mismatch(what)


def _parse_json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _as_list(value: Any, parse_text: bool) -> list[Any]:
    if parse_text and isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = _json(text, "a JSON array")
        else:
            return [] if not text else [p.strip() for p in text.split(",")]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    raise _Mismatch("a list")


def _set(cfg: Any, key: str, value: Any, parse_text: bool) -> None:
    """Set the dotted ``key`` below ``cfg``, checking the name and the type."""
    parts = key.split(".")
    obj = cfg
    for depth, name in enumerate(parts):
        hints = _hints(obj)
        here = ".".join(parts[: depth + 1])
        if name not in hints:
            parent = ".".join(parts[:depth])
            options = [f"{parent}.{n}" if parent else n for n in hints]
            raise BadInput(f"unknown config key '{here}'{_suggest(here, options)}")
        if depth < len(parts) - 1:
            child = getattr(obj, name)
            if not dataclasses.is_dataclass(child):
                raise BadInput(f"config key '{here}' is not a section, so '{key}' does not exist")
            obj = child
            continue
        tp = hints[name]
        try:
            coerced = _coerce(value, tp, parse_text)
        except _Mismatch as e:
            raise BadInput(
                f"config key '{key}': expected {e} ({_type_name(tp)}), got {value!r}"
            ) from None
        object.__setattr__(obj, name, coerced)  # frozen dataclasses too


def apply_overrides(cfg: C, overrides: Iterable[str] | dict[str, Any]) -> C:
    """A copy of ``cfg`` with ``["lr=3e-4", "model.layers=4"]`` (strings, parsed) or
    ``{"lr": 3e-4}`` (Python values) applied; ``cfg`` itself is left unchanged."""
    out = copy.deepcopy(cfg)
    if isinstance(overrides, dict):
        for key, value in overrides.items():
            _set(out, str(key), value, parse_text=isinstance(value, str))
        return out
    for item in overrides:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise BadInput(f"override {item!r}: expected KEY=VALUE, e.g. lr=3e-4")
        _set(out, key.strip(), value, parse_text=True)
    return out


def _check(cfg: Any, prefix: str = "") -> None:
    """Type-check every field (after ``configure()`` may have assigned anything)."""
    for name, tp in _hints(cfg).items():
        value = getattr(cfg, name)
        key = f"{prefix}{name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            _check(value, key + ".")
            continue
        try:
            object.__setattr__(cfg, name, _coerce(value, tp, parse_text=False))
        except _Mismatch as e:
            raise BadInput(
                f"config key '{key}': expected {e} ({_type_name(tp)}), got {value!r}"
            ) from None


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
        hint = _suggest(name, known) or (f" (known: {', '.join(known)})" if known else "")
        raise BadInput(f"experiment '{name}' not found: no {path}{hint}")
    return path


def _apply_experiment(cfg: C, name: str, experiments_dir: str | os.PathLike[str]) -> C:
    path = _experiment_file(name, experiments_dir)
    spec = importlib.util.spec_from_file_location(f"corral_experiment_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise BadInput(f"experiment file {path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise BadInput(f"experiment file {path} failed to load: {type(e).__name__}: {e}")
    overrides = getattr(module, "overrides", None)
    configure = getattr(module, "configure", None)
    if overrides is None and configure is None:
        raise BadInput(f"experiment file {path} defines neither 'overrides' nor 'configure'")
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise BadInput(f"experiment file {path}: 'overrides' must be a dict")
        try:
            cfg = apply_overrides(cfg, overrides)
        except BadInput as e:
            raise BadInput(f"experiment '{name}': {e}")
    if configure is not None:
        result = configure(cfg)
        if result is not None:
            if not isinstance(result, type(cfg)):
                raise BadInput(f"experiment '{name}': configure() returned {type(result)!r}")
            cfg = result
        try:
            _check(cfg)
        except BadInput as e:
            raise BadInput(f"experiment '{name}': {e}")
    return cfg


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
    unless ``save=False``."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise BadInput(f"load_config needs a dataclass type, got {cls!r}")
    argv_sets: list[str] = []
    if argv is not None:
        argv_experiment, argv_sets = parse_argv(argv)
        experiment = argv_experiment or experiment
    cfg = _default(cls)
    if experiment:
        cfg = _apply_experiment(cfg, experiment, experiments_dir)
    cfg = apply_overrides(cfg, overrides)
    cfg = apply_overrides(cfg, argv_sets)
    if save:
        if not hasattr(cfg, "save"):
            raise BadInput(f"{cls.__name__} must subclass TrainingConfig to be saved")
        cfg.save(config_path())
    return cfg
