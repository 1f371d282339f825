"""GPU requests: ``resources.gpus`` (``"L40S:8"``, ``8``, ``"A100:1..2"``, ``"any:1"``) and the
GPUs of one stage (a count, explicit logical indices, or ``"all"``)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corral.spec.bounds import MAX_GPUS
from corral.spec.units import describe

GPU_FORMS = "'L40S:8', '8', 8, 'A100:1..2' (a range), 'any:1', 'L40S' (one GPU)"
STAGE_GPU_FORMS = "a count such as 2, a list of GPU indices such as [0, 1], or 'all'"

_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_COUNT_RE = re.compile(r"^(\d+)(?:\.\.(\d+))?$")


class GpuRequest(BaseModel):
    """How many GPUs of which type one machine must have (``min``..``max``, inclusive)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    type: str | None = Field(None, description="GPU model in upper case, e.g. 'L40S'; None: any.")
    min: int = Field(0, ge=0, description="Fewest GPUs that will do.")
    max: int = Field(0, ge=0, description="Most GPUs the run can use.")

    @model_validator(mode="before")
    @classmethod
    def _parse_forms(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else parse_gpu_request(value)

    @model_validator(mode="after")
    def _check(self) -> GpuRequest:
        if self.max > MAX_GPUS:
            raise ValueError(f"at most {MAX_GPUS} GPUs per machine, got {self.max}")
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max})")
        if self.type is not None and (
            not _TYPE_RE.match(self.type) or self.type != self.type.upper()
        ):
            raise ValueError(f"invalid GPU type '{self.type}' (expected e.g. 'L40S')")
        return self

    def __str__(self) -> str:
        count = str(self.min) if self.min == self.max else f"{self.min}..{self.max}"
        return f"{self.type or 'any'}:{count}"


def _bad(value: object, why: str = "") -> ValueError:
    return ValueError(f"invalid GPU request {describe(value)}{why} (accepted forms: {GPU_FORMS})")


def parse_gpu_request(value: object) -> dict[str, Any]:
    """Parse one written form into the fields of a :class:`GpuRequest`."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _bad(value)
    if isinstance(value, int):
        if value < 0:
            raise _bad(value, ": the count cannot be negative")
        if value > MAX_GPUS:
            raise ValueError(f"at most {MAX_GPUS} GPUs per machine, got {value}")
        return {"type": None, "min": value, "max": value}
    text = value.strip()
    if not text:
        raise _bad(value, ": it is empty")
    if ":" in text:
        name, _, count = text.partition(":")
    elif _COUNT_RE.match(text):
        name, count = "", text
    else:
        name, count = text, "1"
    name, count = name.strip(), count.strip()
    if ":" in text and not name:
        raise _bad(value, ": the GPU type before ':' is missing")
    if name and not _TYPE_RE.match(name):
        raise _bad(value, f": '{name}' is not a GPU type")
    match = _COUNT_RE.match(count)
    if not match:
        raise _bad(value, f": '{count}' is not a count or a range 'MIN..MAX'")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if low > high:
        raise _bad(value, f": the range {low}..{high} is empty")
    if high > MAX_GPUS:
        raise ValueError(f"at most {MAX_GPUS} GPUs per machine, got {high}")
    gpu_type = None if not name or name.lower() == "any" else name.upper()
    return {"type": gpu_type, "min": low, "max": high}


StageGpus = int | list[int] | Literal["all"]


def parse_stage_gpus(value: object) -> StageGpus:
    """A stage's GPUs: a count >= 0, a list of distinct logical indices, or ``"all"``."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"a GPU count cannot be negative, got {value} ({STAGE_GPU_FORMS})")
        if value > MAX_GPUS:
            raise ValueError(f"at most {MAX_GPUS} GPUs per machine, got {value}")
        return value
    if isinstance(value, list):
        if not value:
            raise ValueError("an empty GPU list: use 0 for a stage without GPUs")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise ValueError(
                    f"GPU index {describe(item)} is not an integer >= 0 ({STAGE_GPU_FORMS})"
                )
            if item >= MAX_GPUS:
                raise ValueError(f"GPU index {item} is past the {MAX_GPUS} GPUs a machine may have")
        return list(value)
    raise ValueError(f"invalid stage GPUs {describe(value)} (expected {STAGE_GPU_FORMS})")
