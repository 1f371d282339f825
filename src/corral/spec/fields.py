"""Field types shared by the spec models: names, secret names, env maps, durations, sizes,
storage URIs, paths inside the workdir, acceptance expressions.

Each type is an ``Annotated`` alias whose validator raises ``ValueError`` with a one-line
message; :mod:`corral.spec.report` turns those into located spec errors. ``Label`` carries the
type name shown in ``docs/spec.md``.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from corral.spec.bounds import AT_MOST_DURATION
from corral.spec.text import nul_problem
from corral.spec.units import parse_duration, parse_size, type_name
from corral.wire.progress_patterns import PRESETS, progress_problem


@dataclass(frozen=True)
class Label:
    """The type name of a field in the generated reference (``docs/spec.md``)."""

    text: str


def base_dir(info: ValidationInfo | None) -> Path:
    """The directory relative paths resolve against: the spec file's, else the current one."""
    ctx = info.context if info is not None else None
    if isinstance(ctx, dict) and ctx.get("base_dir") is not None:
        return Path(ctx["base_dir"])
    return Path.cwd()


def _need_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected {what}, got {type_name(value)}")
    return value


class Problems(ValueError):
    """Several located problems found by one model validator.

    ``problems`` holds ``(loc, message)`` pairs; ``loc`` is relative to the validated model.
    """

    def __init__(self, problems: list[tuple[tuple[str | int, ...], str]]):
        super().__init__("; ".join(message for _, message in problems))
        self.problems = problems


# --- names ----------------------------------------------------------------------------------

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
NAME_RULE = "1-63 lower-case letters, digits, '-', '_' or '.', starting with a letter or digit"


def check_name(value: object) -> str:
    text = _need_str(value, "a name")
    if not NAME_RE.match(text):
        shown = f"'{text}'" if len(text) <= 80 else f"'{text[:60]}...' ({len(text)} characters)"
        raise ValueError(f"invalid name {shown} (use {NAME_RULE})")
    return text


Name = Annotated[str, BeforeValidator(check_name), Label("name")]

SECRET_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
SECRET_HINT = "secret values are never written in the spec: set them with `corral secret set NAME`"


def check_secret_name(value: object) -> str:
    # Never echo the input: a mistyped entry may be the secret value itself.
    if isinstance(value, dict):
        raise ValueError(f"expected a secret name, got a mapping; {SECRET_HINT}")
    if not isinstance(value, str) or not SECRET_NAME_RE.match(value):
        raise ValueError(
            "invalid secret name (use upper-case letters, digits and '_', e.g. HF_TOKEN); "
            + SECRET_HINT
        )
    return value


SecretName = Annotated[str, BeforeValidator(check_secret_name), Label("secret name")]


def check_secret_list(value: object) -> object:
    if isinstance(value, dict):
        raise ValueError(f"expected a list of secret names, got a mapping; {SECRET_HINT}")
    return value


# --- environment ----------------------------------------------------------------------------

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_text(value: object) -> str:
    """An env value as text: strings as they are, numbers and booleans as YAML writes them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"expected a string, number or boolean, got {type_name(value)}")


def check_env(value: object) -> object:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of NAME: value, got {type_name(value)}")
    out: dict[str, object] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise ValueError(f"invalid environment variable name '{key}'")
        # Values are never shown in messages: env often holds tokens by mistake.
        out[key] = env_text(item) if isinstance(item, (bool, int, float)) else item
    return out


def _env_value(value: str) -> str:
    problem = nul_problem(value, "an environment variable")
    if problem:
        raise ValueError(problem)
    return value


EnvMap = Annotated[
    dict[str, Annotated[str, AfterValidator(_env_value)]],
    BeforeValidator(check_env),
    Label("mapping NAME: value"),
]


def one_or_many(value: object) -> object:
    """Accept a single string where a list of strings is expected."""
    return [value] if isinstance(value, str) else value


StrList = Annotated[list[str], BeforeValidator(one_or_many), Label("string or list of strings")]


def _command(value: str) -> str:
    problem = nul_problem(value, "a shell command")
    if problem:
        raise ValueError(problem)
    return value


#: A shell command (``run``, ``setup``): any text a shell can be given.
Command = Annotated[str, AfterValidator(_command)]
CommandList = Annotated[
    list[Command], BeforeValidator(one_or_many), Label("string or list of strings")
]


def _progress(value: str) -> str:
    problem = progress_problem(value)
    if problem:
        raise ValueError(problem)
    return value


#: A stage's ``progress``: a preset name or a regex with named groups.
ProgressPattern = Annotated[
    str, AfterValidator(_progress), Label(f"preset ({', '.join(PRESETS)}) or regex")
]

# --- numbers, durations, sizes --------------------------------------------------------------

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False), Label("number > 0")]
NonNegInt = Annotated[int, Field(ge=0), Label("integer >= 0")]
Duration = Annotated[float, BeforeValidator(parse_duration), AT_MOST_DURATION, Label("duration")]
Size = Annotated[float, BeforeValidator(parse_size), Label("size")]


def parse_fraction(value: object) -> object:
    """``0.9`` or ``"90%"`` -> 0.9 (range checked by the field)."""
    if isinstance(value, str):
        text = value.strip()
        number = text[:-1] if text.endswith("%") else text
        try:
            parsed = float(number)
        except ValueError:
            raise ValueError(f"expected a fraction such as 0.9 or '90%', got '{value}'")
        return parsed / 100 if text.endswith("%") else parsed
    return value


Fraction = Annotated[
    float, BeforeValidator(parse_fraction), Field(gt=0, le=1), Label("fraction (0, 1] or '90%'")
]

# --- paths and storage ----------------------------------------------------------------------

STORAGE_FORMS = "a local path, file:///absolute/path or s3://bucket/prefix"
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
#: the bucket of ``s3:///prefix`` (no bucket written): the name IO.net's guide gives its
#: Cloudflare R2 bucket, read where the spec is parsed (the CLI), so every later reader (the
#: controller, the agent, the SDK) sees the whole URI
BUCKET_VAR = "R2_BUCKET_NAME"


def _environ(info: ValidationInfo | None) -> Mapping[str, str]:
    ctx = info.context if info is not None else None
    if isinstance(ctx, dict) and isinstance(ctx.get("environ"), Mapping):
        return ctx["environ"]
    return os.environ


def check_storage(value: object, info: ValidationInfo) -> str:
    """A storage URI; a local path is made absolute (relative to the spec file's directory)."""
    text = _need_str(value, f"a storage URI ({STORAGE_FORMS})").strip()
    if not text:
        raise ValueError(f"empty storage URI (expected {STORAGE_FORMS})")
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme.lower() == "file":
            if not rest.startswith("/"):
                raise ValueError(f"file URI '{text}' needs an absolute path: file:///path")
            return "file://" + rest
        if scheme.lower() == "s3":
            bucket = rest.split("/", 1)[0]
            if not bucket:
                bucket = _environ(info).get(BUCKET_VAR, "").strip()
                if not bucket:
                    raise ValueError(
                        f"'{text}' names no bucket and {BUCKET_VAR} is not set "
                        "(write s3://bucket/prefix)"
                    )
                rest = bucket + rest
            if not _BUCKET_RE.match(bucket):
                raise ValueError(f"invalid S3 bucket name '{bucket}' in '{text}'")
            return "s3://" + rest
        raise ValueError(f"unsupported storage scheme '{scheme}://' (expected {STORAGE_FORMS})")
    path = Path(os.path.expanduser(text))
    return str(path if path.is_absolute() else (base_dir(info) / path).resolve())


StorageUri = Annotated[str, BeforeValidator(check_storage), Label("storage URI")]


def check_relpath(value: object) -> str:
    """A path (or glob) inside the workdir, kept relative, in POSIX form."""
    text = _need_str(value, "a path relative to the workdir").strip()
    if not text:
        raise ValueError("empty path")
    if text.startswith(("/", "~")):
        raise ValueError(f"'{text}' must be relative to the workdir")
    norm = posixpath.normpath(text)
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"'{text}' points outside the workdir")
    return norm


RelPath = Annotated[str, BeforeValidator(check_relpath), Label("path in workdir")]
RelPathList = Annotated[
    list[RelPath], BeforeValidator(one_or_many), Label("list of paths in workdir")
]


def check_workdir(value: object, info: ValidationInfo) -> Path:
    text = str(value) if isinstance(value, Path) else _need_str(value, "a directory path")
    path = Path(os.path.expanduser(text))
    return path if path.is_absolute() else (base_dir(info) / path).resolve()


WorkDir = Annotated[Path, BeforeValidator(check_workdir), Label("path")]


def check_url(value: object) -> str:
    from urllib.parse import urlsplit

    text = _need_str(value, "an http(s) URL").strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("expected an http:// or https:// URL")
    return text


HttpUrl = Annotated[str, BeforeValidator(check_url), Label("http(s) URL")]

# --- acceptance expressions -----------------------------------------------------------------

Op = Literal["<=", "<", ">=", ">", "=="]
ACCEPTANCE_FORMS = "METRIC OP NUMBER such as 'cer_clean <= 0.03', OP one of <=, <, >=, >, =="
_ACCEPT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_./-]*)\s*(<=|>=|==|<|>)\s*(\S+)\s*$")


class Acceptance(BaseModel):
    """One acceptance criterion of the evaluation report, e.g. ``cer_clean <= 0.03``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    metric: str = Field(description="Key in the evaluation report.")
    op: Op = Field(description="Comparison.")
    value: float = Field(description="Threshold.", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return value
        text = _need_str(value, f"an acceptance expression ({ACCEPTANCE_FORMS})")
        match = _ACCEPT_RE.match(text)
        number: float | None = None
        if match:
            try:
                number = float(match.group(3))
            except ValueError:
                number = None
        if match is None or number is None or not math.isfinite(number):
            raise ValueError(
                f"invalid acceptance expression '{text}' (expected {ACCEPTANCE_FORMS})"
            )
        return {"metric": match.group(1), "op": match.group(2), "value": number}

    def passes(self, observed: float) -> bool:
        """Whether ``observed`` (the metric's value in the report) meets this criterion."""
        return {
            "<=": observed <= self.value,
            "<": observed < self.value,
            ">=": observed >= self.value,
            ">": observed > self.value,
            "==": observed == self.value,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value!r}"
