"""The job spec: the top level of ``corral.yaml`` and its stages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from corral.spec.checks import stage_problems
from corral.spec.code import CodeSpec, Files, ImageAuth, Mount
from corral.spec.fields import (
    Command,
    CommandList,
    Duration,
    EnvMap,
    Label,
    Name,
    Problems,
    ProgressPattern,
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
from corral.spec.nodes import StageNodes, node_problems, parse_stage_nodes
from corral.spec.schedule import Schedule
from corral.spec.stopping import (
    SAVE_COMMAND,
    SAVE_SIGNAL,
    STOP_GRACE,
    STOP_SIGNAL,
    SignalName,
)
from corral.spec.volumes import VolumeList

MAIN_STAGE = "main"
#: stage fields the single `run:` form sets at the top level
STOP_KEYS = ("stop_signal", "stop_grace", "save_signal", "save_command")


class Service(SpecModel):
    """A stage that serves (a model, results) instead of finishing: it starts when its `needs`
    are done and keeps running after the other stages end, until `corral stop`, reachable
    through the agent's port at `<agent>/services/<stage>/` (`corral status` shows the URL)."""

    ports: Annotated[list[Annotated[int, Field(ge=1, le=65535)]], Label("list of ports")] = Field(
        min_length=1,
        description="Ports the stage's command listens on (127.0.0.1 is enough); the first is "
        "reached at /services/<stage>/, any other at /services/<stage>:<port>/.",
    )
    health: str | None = Field(
        None,
        pattern=r"^/[^\s]*$",
        description="HTTP path that answers 2xx when the service is up (e.g. /health); "
        "`corral status` shows whether it does.",
    )
    public: bool = Field(
        True,
        description="Anyone with the URL may call it (the default, as a serving endpoint); "
        "false: callers need the run's agent token.",
    )
    root: bool = Field(
        False,
        description="Also serve it at the root of the agent's port: every path the agent's own "
        "API does not use (/, /static/..., /v1/chat/completions) goes to the first port, for "
        "web UIs that call absolute paths. At most one stage.",
    )


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
    nodes: Annotated[
        StageNodes,
        BeforeValidator(parse_stage_nodes),
        Label("count of machines or 'all'"),
    ] = Field(
        1,
        description="Machines this stage runs on, of the job's `resources.nodes`: 1 (the "
        "default) stays on the head node (rank 0); a count N runs it on ranks 0..N-1; 'all' "
        "on every node. Each node runs it with the same `gpus`.",
    )
    needs: StrList = Field(
        default_factory=list, description="Stages that must finish first (a name or a list)."
    )
    env: EnvMap = Field(
        default_factory=dict, description="Extra environment for this stage (over the job's)."
    )
    resume_args: str | None = Field(
        None,
        min_length=1,
        description="Appended to `run` (after a space) when the attempt starts from a "
        "restored checkpoint (`checkpoints.path`), e.g. `--init_from=resume`; "
        "$CORRAL_RESUME_FROM holds the restored path.",
    )
    service: Service | None = Field(
        None,
        description="Make this stage a service: it keeps running after the other stages "
        "end, billed and within the budget and deadline, until `corral stop` (which then "
        "ends the run SUCCEEDED when every other stage did).",
    )
    progress: ProgressPattern | None = Field(
        None,
        description="Read progress from this stage's log, for a script that does not call "
        "the SDK: a preset (hf, nanogpt, lightning, ultralytics, torchtitan, nanochat) or a "
        "regex searched in every line (progress-bar redraws count as lines) with named groups "
        "`step`, `total`, `loss`, `epoch`; any other group is a metric, e.g. "
        "'Step (?P<step>\\d+)/(?P<total>\\d+) loss=(?P<loss>\\S+)'. Feeds `corral status`, "
        "progress events and webhooks, trackers, the idle watcher and the ETA as the SDK's "
        "report() does (see docs/foreign.md).",
    )
    stop_signal: SignalName = STOP_SIGNAL
    stop_grace: Duration | None = STOP_GRACE
    save_signal: SignalName | None = SAVE_SIGNAL
    save_command: Command | None = SAVE_COMMAND
    expected_runtime: Duration | None = Field(
        None,
        description="How long this stage usually takes, e.g. '2h': `corral estimate` prices "
        "the stage with it (a hint, never a limit). Without it, the estimate takes the stage's "
        "time in earlier runs of the same spec.",
    )


class JobSpec(SpecModel):
    """A job: what to run (``run`` or ``stages``), on what machine, and how to babysit it."""

    name: Name = Field(
        description="Job name: 1-63 lower-case letters, digits, '-', '_', '.', starting with a "
        "letter or digit."
    )
    project: Name | None = Field(
        None,
        description="The project this run's money counts against: a spending cap per project "
        "(`corral budget set --project NAME`) counts every run labelled so. Same rules as "
        "`name`.",
    )
    workdir: WorkDir = Field(
        Path("."),
        description="Directory the job runs in; relative to the spec file, absolute after "
        "loading. Default: the spec file's directory. On a machine that does not share this "
        "one's files it is packed and shipped (see `code`; .gitignore and .corralignore "
        "respected); with `CORRAL_SERVER` it is packed by the CLI and uploaded to the server.",
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
    volumes: VolumeList = Field(
        default_factory=list,
        description="Persistent volumes mounted on the machine; they outlive the run (section "
        "below).",
    )
    run: Command | None = Field(
        None, min_length=1, description="One shell command (give `run` or `stages`, not both)."
    )
    stop_signal: SignalName = STOP_SIGNAL
    stop_grace: Duration | None = STOP_GRACE
    save_signal: SignalName | None = SAVE_SIGNAL
    save_command: Command | None = SAVE_COMMAND
    stages: list[Stage] | None = Field(
        None, min_length=1, description="Stages, a DAG through `needs` (instead of `run`)."
    )
    progress: ProgressPattern | None = Field(
        None,
        description="With `run`: read progress from its log (see the stage field `progress`).",
    )
    resume_args: str | None = Field(
        None,
        min_length=1,
        description="With `run`: appended to it when the attempt starts from a restored "
        "checkpoint (see the stage field).",
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
    code: CodeSpec = Field(
        default_factory=CodeSpec,
        description="Where the code comes from on a remote machine: the shipped workdir or git.",
    )
    files: Files = Field(
        default_factory=dict,
        description="Small local files put on the machine: `{machine path: local file}` "
        "(machine paths absolute or workdir-relative; local ones relative to the spec file).",
    )
    mounts: list[Mount] = Field(
        default_factory=list,
        description="Object-storage prefixes copied to machine directories before the stages.",
    )
    image: str | None = Field(
        None,
        min_length=1,
        description="Container image the job runs in: the machine's container where the "
        "provider runs containers (default: the provider's); elsewhere each command runs in "
        "it through docker or podman (a launch where neither is found is refused).",
    )
    image_auth: ImageAuth | None = Field(
        None, description="Credentials of the image's private registry."
    )
    schedule: Schedule | None = Field(
        None,
        description="Start this job on a cron schedule: `corral schedule add FILE` registers "
        "it (`corral launch` runs it once, now).",
    )
    priority: Annotated[int, Field(ge=0, le=9), Label("whole number from 0 to 9")] = Field(
        5,
        description="0-9, higher first: among runs waiting for the same GPUs, the highest "
        "priority gets the next free one; equal priorities go first come, first served.",
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
        if self.stages is not None:
            for key in STOP_KEYS:
                if getattr(self, key) != JobSpec.model_fields[key].default:
                    raise Problems([((key,), f"with `stages`, set `{key}` on each stage")])
        if self.resume_args is not None and self.stages is not None:
            raise Problems([(("resume_args",), "with `stages`, give `resume_args` in each stage")])
        res = self.resources
        problems = stage_problems(self.stages or [], res.gpus.max)
        problems += node_problems(self.stages or [], res.nodes, res.gpus.min, res.gpus.max)
        if self.stages is not None and self.progress is not None:
            problems.append((("progress",), "with `stages`, set `progress` on the stages"))
        services = {s.name for s in self.stages or [] if s.service is not None}
        roots = [s.name for s in self.stages or [] if s.service and s.service.root]
        for i, stage in enumerate(self.stages or []):
            if stage.service and stage.service.root and stage.name != roots[0]:
                problems.append(
                    (
                        ("stages", i, "service", "root"),
                        f"only one service can be served at the root; '{roots[0]}' is already",
                    )
                )
        for i, stage in enumerate(self.stages or []):
            for need in stage.needs:
                if need in services:
                    problems.append(
                        (
                            ("stages", i, "needs"),
                            f"stage '{stage.name}' needs '{need}', a service: a service never "
                            "finishes, so nothing can wait for it",
                        )
                    )
        if problems:
            raise Problems(problems)
        return self

    def stage_list(self) -> list[Stage]:
        """The stages to run: ``run:`` is one stage named ``main`` with all GPUs, on every
        node."""
        if self.stages is not None:
            return list(self.stages)
        stop = {key: getattr(self, key) for key in STOP_KEYS}
        return [
            Stage(
                name=MAIN_STAGE,
                run=self.run or "",
                gpus="all",
                nodes="all",
                progress=self.progress,
                resume_args=self.resume_args,
                **stop,
            )
        ]
