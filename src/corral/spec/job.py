"""The job spec: the top level of ``corral.yaml`` and its stages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from corral.spec.checks import stage_problems
from corral.spec.fields import (
    Command,
    CommandList,
    EnvMap,
    Label,
    Name,
    Problems,
    SecretName,
    StrList,
    WorkDir,
    check_secret_list,
)
from corral.spec.gpus import StageGpus, parse_stage_gpus
from corral.spec.models import (
    Artifacts,
    Budget,
    Checkpoints,
    EvalSpec,
    Limits,
    Notify,
    Recovery,
    Resources,
    SpecModel,
    Tracker,
)

MAIN_STAGE = "main"


class Stage(SpecModel):
    """One step of the job. Stages whose `needs` are done run in parallel."""

    name: Name = Field(description="Unique stage name (same characters as the job name).")
    run: Command = Field(min_length=1, description="Shell command, run with bash in the workdir.")
    gpus: Annotated[
        StageGpus,
        BeforeValidator(parse_stage_gpus),
        Label("count, list of indices or 'all'"),
    ] = Field(
        0,
        description="GPUs for this stage: a count (any free ones), logical indices such as "
        "[0, 1, 2, 3], or 'all'. Default 0: stages get no GPU unless they ask.",
    )
    needs: StrList = Field(
        default_factory=list, description="Stages that must finish first (a name or a list)."
    )
    env: EnvMap = Field(
        default_factory=dict, description="Extra environment for this stage (over the job's)."
    )


class JobSpec(SpecModel):
    """A job: what to run (``run`` or ``stages``), on what machine, and how to babysit it."""

    name: Name = Field(
        description="Job name: 1-63 lower-case letters, digits, '-', '_', '.', starting with a "
        "letter or digit."
    )
    workdir: WorkDir = Field(
        Path("."),
        description="Directory the job runs in and that is shipped to the machine; relative "
        "to the spec file. Absolute after loading. Default: the spec file's directory.",
    )
    env: EnvMap = Field(
        default_factory=dict,
        description="Environment for every stage. Numbers and booleans become strings.",
    )
    secrets: Annotated[list[SecretName], BeforeValidator(check_secret_list)] = Field(
        default_factory=list,
        description="Names of secrets exported to the job's environment. Values are never in "
        "the spec: set them with `corral secret set NAME`.",
    )
    setup: CommandList = Field(
        default_factory=list, description="Shell commands run once before the stages, in order."
    )
    resources: Resources = Field(
        default_factory=Resources, description="The machine the job needs (section below)."
    )
    run: Command | None = Field(
        None, min_length=1, description="One shell command (give `run` or `stages`, not both)."
    )
    stages: list[Stage] | None = Field(
        None, min_length=1, description="Stages, a DAG through `needs` (instead of `run`)."
    )
    checkpoints: Checkpoints = Field(
        default_factory=Checkpoints, description="Checkpoint directory, storage and retention."
    )
    artifacts: Artifacts = Field(
        default_factory=Artifacts, description="Files collected when the run ends."
    )
    recovery: Recovery = Field(
        default_factory=Recovery, description="Restarts after preemptions and failures."
    )
    budget: Budget = Field(default_factory=Budget, description="Dollar budget over all attempts.")
    limits: Limits = Field(default_factory=Limits, description="Runtime and idle limits.")
    notify: Notify = Field(default_factory=Notify, description="Webhooks that receive run events.")
    trackers: list[Tracker] = Field(
        default_factory=list, description="Experiment trackers that receive metrics."
    )
    eval: EvalSpec = Field(
        default_factory=EvalSpec, description="Evaluation report and acceptance criteria."
    )

    @model_validator(mode="before")
    @classmethod
    def _default_workdir(cls, data: Any) -> Any:
        # The default is resolved like a written "." (against the spec file's directory).
        if isinstance(data, dict) and data.get("workdir") is None:
            return {**data, "workdir": "."}
        return data

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if self.run is None and self.stages is None:
            raise Problems([((), "give either `run` (one command) or `stages`")])
        if self.run is not None and self.stages is not None:
            raise Problems([(("run",), "give either `run` or `stages`, not both")])
        problems = stage_problems(self.stages or [], self.resources.gpus.max)
        if problems:
            raise Problems(problems)
        return self

    def stage_list(self) -> list[Stage]:
        """The stages to run: ``run:`` is one stage named ``main`` with all GPUs."""
        if self.stages is not None:
            return list(self.stages)
        return [Stage(name=MAIN_STAGE, run=self.run or "", gpus="all")]
