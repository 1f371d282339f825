"""The health verdict of a machine's GPUs, from thresholds a user can set.

A verdict is ``healthy`` (nothing to say), ``warning`` (worth a look: hot, memory nearly
full, a running stage's GPU stuck at zero utilisation) or ``unhealthy`` (an issue: too hot,
uncorrected ECC errors, a node whose agent does not answer). Each line names the GPU and
the threshold it crossed.

Thresholds (:class:`GpuThresholds`, defaults below) are set with ``CORRAL_GPU_THRESHOLDS``,
comma-separated ``key=value`` pairs (``corral server --gpu-threshold KEY=VALUE`` sets it):

=========================  =======  ==========================================================
key                        default  crossed when
=========================  =======  ==========================================================
``temperature_warn_c``     85       a GPU is at least this hot (warning)
``temperature_critical_c`` 95       a GPU is at least this hot (issue)
``memory_warn_pct``        95       a GPU's memory is at least this full (warning)
``util_zero_warn_s``       300      a GPU a running stage holds has read 0 % for this long
                                    (warning; only nodes know which stage holds a GPU)
``ecc_uncorrected_max``    0        a GPU reports more uncorrected (volatile) ECC errors
                                    than this (issue; only where the driver counts them)
=========================  =======  ==========================================================
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.errors import BadInput

ENV_GPU_THRESHOLDS = "CORRAL_GPU_THRESHOLDS"

Status = Literal["healthy", "warning", "unhealthy"]


class GpuThresholds(BaseModel):
    """When a GPU reading is worth a warning or an issue (see the module's table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature_warn_c: float = Field(default=85.0, gt=0)
    temperature_critical_c: float = Field(default=95.0, gt=0)
    memory_warn_pct: float = Field(default=95.0, gt=0, le=100)
    util_zero_warn_s: float = Field(default=300.0, ge=0)
    ecc_uncorrected_max: int = Field(default=0, ge=0)


def parse_thresholds(text: str, *, where: str = ENV_GPU_THRESHOLDS) -> GpuThresholds:
    """``"temperature_warn_c=80,util_zero_warn_s=600"`` -> :class:`GpuThresholds` (unnamed
    keys keep their defaults). :class:`BadInput` naming ``where`` and the key."""
    return thresholds_of([p for p in text.split(",") if p.strip()], where=where)


def thresholds_of(pairs: Iterable[str], *, where: str = ENV_GPU_THRESHOLDS) -> GpuThresholds:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"{where}: expected KEY=VALUE, got {pair.strip()!r}")
        values[key.strip()] = value.strip()
    try:
        return GpuThresholds.model_validate(values)
    except ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        known = ", ".join(GpuThresholds.model_fields)
        hint = f" (known: {known})" if first["type"] == "extra_forbidden" else ""
        raise BadInput(f"{where}: {key}: {first['msg']}{hint}") from None


def thresholds_from_env(environ: Mapping[str, str] | None = None) -> GpuThresholds:
    env = os.environ if environ is None else environ
    return parse_thresholds(env.get(ENV_GPU_THRESHOLDS, ""))


class Verdict(BaseModel):
    """``healthy`` with no lines, else the warnings and issues that made it otherwise."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Status
    healthy: bool
    warnings: list[str]
    issues: list[str]

    @classmethod
    def of(cls, warnings: list[str], issues: list[str]) -> Verdict:
        status: Status = "unhealthy" if issues else "warning" if warnings else "healthy"
        return cls(status=status, healthy=status == "healthy", warnings=warnings, issues=issues)

    @classmethod
    def merged(cls, verdicts: Iterable[Verdict]) -> Verdict:
        warnings: list[str] = []
        issues: list[str] = []
        for v in verdicts:
            warnings += v.warnings
            issues += v.issues
        return cls.of(warnings, issues)


def _num(value: float) -> str:
    return f"{value:g}"


def judge(
    gpus: Iterable[Mapping[str, object]], thresholds: GpuThresholds, *, where: str = ""
) -> Verdict:
    """The verdict on one machine's GPUs (rows as :class:`corral.gpu.GpuSample` dicts, with
    ``stage`` and ``zero_util_s`` where a node's agent reports them). ``where`` prefixes
    each line (a node's name)."""
    t = thresholds
    warnings: list[str] = []
    issues: list[str] = []
    prefix = f"{where}: " if where else ""
    for g in gpus:
        name = f"{prefix}GPU {g.get('id')} ({g.get('name')})"
        temp = g.get("temperature_c")
        if isinstance(temp, int | float):
            if temp >= t.temperature_critical_c:
                issues.append(
                    f"{name} is at {_num(temp)} °C (critical at {_num(t.temperature_critical_c)})"
                )
            elif temp >= t.temperature_warn_c:
                warnings.append(
                    f"{name} is at {_num(temp)} °C (warning at {_num(t.temperature_warn_c)})"
                )
        used, total = g.get("memory_used_mb"), g.get("memory_total_mb")
        if isinstance(used, int | float) and isinstance(total, int | float) and total > 0:
            pct = 100.0 * used / total
            if pct >= t.memory_warn_pct:
                warnings.append(
                    f"{name} memory is {pct:.0f}% full ({_num(used)} of {_num(total)} MiB; "
                    f"warning at {_num(t.memory_warn_pct)}%)"
                )
        zero = g.get("zero_util_s")
        if isinstance(zero, int | float) and zero >= t.util_zero_warn_s and g.get("stage"):
            warnings.append(
                f"{name} has read 0% utilisation for {zero:.0f} s while stage "
                f"{g.get('stage')!r} runs (warning after {_num(t.util_zero_warn_s)} s)"
            )
        ecc = g.get("ecc_uncorrected")
        if isinstance(ecc, int) and ecc > t.ecc_uncorrected_max:
            issues.append(
                f"{name} reports {ecc} uncorrected ECC error(s) "
                f"(more than {t.ecc_uncorrected_max}: replace or reset the GPU)"
            )
    return Verdict.of(warnings, issues)
