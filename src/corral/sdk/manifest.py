"""The ``COMPLETE`` manifest: written last into a checkpoint, it is what makes the checkpoint exist.

It is JSON::

    {"format": "corral-checkpoint", "format_version": 1, "corral_version": "0.1.0",
     "step": 1200, "time": 1767225600.0, "metrics": {"val_loss": 0.41},
     "files": {"state.pkl": {"size": 5123, "sha256": "..."},
               "tensors-00000.safetensors": {"size": 134217800, "sha256": "..."}, ...}}

A sharded checkpoint (:mod:`corral.sdk.sharded`) has ``"format_version": 2`` and
``"world_size": N``, and its ``files`` are every rank's (``r00000-state.pkl``, ...); a corral that
reads only format 1 refuses it as "written by a newer corral" instead of skipping it.

``time`` is unix seconds when the checkpoint became durable; ``metrics`` are the values given to
``save``. A non-finite float is stored as the string ``"nan"``, ``"inf"`` or ``"-inf"`` (as in
the progress file: the file stays strict JSON and a diverged value is not mistaken for a missing
one) and read back as that float. Manifests written before that hold ``null`` there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.errors import BadInput, CorralError

MANIFEST_NAME = "COMPLETE"
FORMAT_NAME: Final = "corral-checkpoint"
FORMAT_VERSION = 2
#: What a checkpoint written by one process says (readable by corral before sharding existed).
SINGLE_FORMAT_VERSION = 1
#: A sharded checkpoint (several ranks' files, ``world_size``) says this.
SHARDED_FORMAT_VERSION = 2


class CheckpointError(CorralError):
    """A checkpoint could not be written, or one asked for by path is incomplete or corrupt."""

    code = "checkpoint_error"


class CheckpointLoadError(CheckpointError):
    """A checkpoint whose files verified (sizes and sha256 match) cannot be loaded: a class in
    it moved or was renamed, a package it needs (torch, numpy) is missing, a tensor cannot go to
    ``map_location``. Not corruption, so ``restore()`` raises it instead of falling back to an
    older checkpoint (which would silently throw away training)."""

    code = "checkpoint_load_error"


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped because it is incomplete or corrupt (the message names it)."""


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(ge=0, description="Size in bytes.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Hex SHA-256 of the content.")


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["corral-checkpoint"] = FORMAT_NAME
    format_version: int = Field(ge=1, le=FORMAT_VERSION)
    corral_version: str
    step: int = Field(ge=0)
    time: float
    metrics: dict[str, Any] = Field(default_factory=dict)
    files: dict[str, FileEntry]
    #: the ranks that wrote a sharded checkpoint (format version 2); None: one process
    world_size: int | None = Field(default=None, ge=1)

    def to_bytes(self) -> bytes:
        data = self.model_dump()
        if data["world_size"] is None:
            del data["world_size"]  # format 1 as before: older corral versions read it
        data["metrics"] = _encode_non_finite(data["metrics"])
        return (json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files.values())


class CheckpointInfo(BaseModel):
    """One complete checkpoint, as its ``COMPLETE`` manifest describes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int
    path: str
    name: str
    metrics: dict[str, Any]
    time: float
    size_bytes: int
    corral_version: str
    format_version: int
    #: the ranks that wrote it (a sharded checkpoint), 1 for one process
    world_size: int = 1

    @classmethod
    def of(cls, found: Any, manifest: Manifest) -> CheckpointInfo:
        """The info of a checkpoint found by the layout (``found.path``, ``found.name``)."""
        return cls(
            step=manifest.step,
            path=found.path,
            name=found.name,
            metrics=manifest.metrics,
            time=manifest.time,
            size_bytes=manifest.size_bytes,
            corral_version=manifest.corral_version,
            format_version=manifest.format_version,
            world_size=manifest.world_size or 1,
        )


def parse_manifest(data: bytes, name: str) -> Manifest:
    """Parse manifest bytes; raise :class:`CheckpointError` naming checkpoint ``name``."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint {name}: COMPLETE manifest is not valid JSON ({exc})"
        ) from None
    newer = (
        isinstance(raw, dict)
        and raw.get("format") == FORMAT_NAME
        and isinstance(raw.get("format_version"), int)
        and raw["format_version"] > FORMAT_VERSION
    )
    if newer:  # complete, but not ours to read: never fall back past it silently
        raise CheckpointLoadError(
            f"checkpoint {name}: written by a newer corral ({raw.get('corral_version')!s:.40}, "
            f"checkpoint format {raw['format_version']}; this corral reads format "
            f"{FORMAT_VERSION}): upgrade corral to restore it"
        )
    if isinstance(raw, dict) and isinstance(raw.get("metrics"), dict):
        raw["metrics"] = _decode_non_finite(raw["metrics"])
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "manifest"
        raise CheckpointError(
            f"checkpoint {name}: COMPLETE manifest is invalid ({where}: {first['msg']})"
        ) from None


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _encode_non_finite(value: Any) -> Any:
    """``value`` with every non-finite float as ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _encode_non_finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode_non_finite(v) for v in value]
    return value


def _decode_non_finite(value: Any) -> Any:
    """The inverse of :func:`_encode_non_finite`: those three strings become floats again."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _decode_non_finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_non_finite(v) for v in value]
    return value


def clean_metrics(metrics: dict[str, Any] | None) -> dict[str, Any]:
    """Metrics as JSON values: numpy/torch scalars become numbers (non-finite floats stay
    floats; the manifest writes them as ``"nan"``/``"inf"``/``"-inf"``)."""
    if metrics is not None and not isinstance(metrics, Mapping):
        raise BadInput(f"metrics must be a dict of name to value, got {type(metrics).__name__}")
    out: dict[str, Any] = {}
    for key, value in (metrics or {}).items():
        out[str(key)] = _clean_value(value)
    return out


def _clean_value(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, dict):
        return {str(k): _clean_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_value(v) for v in value]
    return str(value)
