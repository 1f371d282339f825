"""Load a job spec: read the file, parse YAML (with lines), apply ``--set`` overrides, validate,
resolve paths. Every problem becomes one :class:`~corral.errors.SpecError`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from corral.errors import NotFound
from corral.spec.checks import raw_graph_problems
from corral.spec.job import JobSpec
from corral.spec.overrides import apply_overrides
from corral.spec.report import Locator, spec_error, translate
from corral.spec.units import type_name
from corral.spec.yamlsrc import MAX_SPEC_BYTES, Parsed, parse_yaml, utf8_size

DEFAULT_FILE = "corral.yaml"


def load_spec(path: str | Path, overrides: Iterable[str] = ()) -> JobSpec:
    """Load and validate the spec at ``path`` (a directory means its ``corral.yaml``)."""
    given = Path(path)
    file = given / DEFAULT_FILE if given.is_dir() else given
    if not file.is_file():
        raise NotFound(f"spec file not found: {file}")
    source = str(path) if file == given else str(file)
    try:
        size = file.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise spec_error([_too_big(source, size)])
        with file.open(encoding="utf-8") as handle:  # a file that grew: read_text bounded
            text = handle.read(MAX_SPEC_BYTES + 1)
    except UnicodeDecodeError:
        raise spec_error([_top(source, "the file is not UTF-8 text")])
    except OSError as exc:
        raise NotFound(f"cannot read spec file {file}: {exc.strerror or exc}")
    return load_spec_text(text, source=source, base_dir=file.resolve().parent, overrides=overrides)


def load_spec_text(
    text: str,
    *,
    source: str = "<string>",
    base_dir: str | Path | None = None,
    overrides: Iterable[str] = (),
) -> JobSpec:
    """Validate spec text; relative paths resolve against ``base_dir`` (default: the cwd).

    Text over :data:`MAX_SPEC_BYTES` is refused before it is parsed."""
    size = utf8_size(text)
    if size > MAX_SPEC_BYTES:
        raise spec_error([_too_big(source, size)])
    parsed = parse_yaml(text, source)
    if parsed.data is None:
        raise spec_error([_top(source, "the spec is empty (it needs at least `name` and `run`)")])
    if not isinstance(parsed.data, dict):
        got = type_name(parsed.data)
        raise spec_error([_top(source, f"expected a mapping of keys at the top, got {got}")])
    _raw_env_values(parsed)
    where = Locator(source, parsed.lines)
    data = apply_overrides(parsed.data, overrides, JobSpec, where)
    base = Path(base_dir).resolve() if base_dir is not None else Path.cwd()
    errors = list(parsed.problems)
    try:
        spec = JobSpec.model_validate(data, context={"base_dir": base})
    except ValidationError as exc:
        errors.extend(translate(exc, JobSpec, where))
        # The model checks the stage graph only once every field is valid: check it as
        # written too, so that every error shows in one run (spec_error drops repeats).
        errors.extend(where.error(loc, message) for loc, message in raw_graph_problems(data))
        spec = None
    if errors or spec is None:
        raise spec_error(errors)
    return spec


def _top(source: str, message: str) -> dict[str, Any]:
    return {"file": source, "line": 1, "field": "", "message": message}


def _too_big(source: str, size: int) -> dict[str, Any]:
    message = (
        f"the spec is {size:,} bytes, more than the {MAX_SPEC_BYTES:,} bytes (1 MiB) a spec "
        "may hold"
    )
    return {"file": source, "line": None, "field": "", "message": message}


def _raw_env_values(parsed: Parsed) -> None:
    """Keep env values as written: ``VERSION: 1.10`` is "1.10", not "1.1"."""
    data = parsed.data
    maps: list[tuple[tuple[str | int, ...], Any]] = [(("env",), data.get("env"))]
    stages = data.get("stages")
    if isinstance(stages, list):
        for i, stage in enumerate(stages):
            if isinstance(stage, dict):
                maps.append((("stages", i, "env"), stage.get("env")))
    for loc, env in maps:
        if not isinstance(env, dict):
            continue
        for key, value in env.items():
            raw = parsed.raw.get((*loc, key))
            if isinstance(value, (bool, int, float)) and raw is not None:
                env[key] = raw


def spec_hash(spec: JobSpec) -> str:
    """SHA-256 (hex) of the resolved spec's canonical JSON: equal specs, equal hashes."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def canonical_json(spec: JobSpec) -> str:
    """The resolved spec as JSON with sorted keys and no spaces."""
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def spec_to_yaml(spec: JobSpec) -> str:
    """The resolved spec as YAML, in field order (what ``corral validate`` prints)."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
