"""The job spec (``corral.yaml``): models, loading, validation, ``--set`` overrides.

``load_spec(path, overrides)`` returns a validated :class:`JobSpec` or raises one
:class:`~corral.errors.SpecError` listing every problem with its file, line and field. The
field reference is ``docs/spec.md`` (generated from the field descriptions).
"""

from corral.spec.fields import Acceptance
from corral.spec.gpus import GpuRequest, parse_gpu_request, parse_stage_gpus
from corral.spec.job import MAIN_STAGE, JobSpec, Stage
from corral.spec.loader import canonical_json, load_spec, load_spec_text, spec_hash, spec_to_yaml
from corral.spec.models import (
    ALL_EVENTS,
    EVENTS,
    RECOVERY_STRATEGIES,
    Artifacts,
    Budget,
    Checkpoints,
    EvalSpec,
    Limits,
    Notify,
    Recovery,
    Resources,
    Tracker,
    Webhook,
)
from corral.spec.report import format_error, format_loc
from corral.spec.units import format_duration, format_size, parse_duration, parse_size

__all__ = [
    "ALL_EVENTS",
    "EVENTS",
    "MAIN_STAGE",
    "RECOVERY_STRATEGIES",
    "Acceptance",
    "Artifacts",
    "Budget",
    "Checkpoints",
    "EvalSpec",
    "GpuRequest",
    "JobSpec",
    "Limits",
    "Notify",
    "Recovery",
    "Resources",
    "Stage",
    "Tracker",
    "Webhook",
    "canonical_json",
    "format_duration",
    "format_error",
    "format_loc",
    "format_size",
    "load_spec",
    "load_spec_text",
    "parse_duration",
    "parse_gpu_request",
    "parse_size",
    "parse_stage_gpus",
    "spec_hash",
    "spec_to_yaml",
]
