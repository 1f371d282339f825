"""The agent's plan: everything ``corral agent`` needs to run one attempt of a run on a node.

The controller builds the plan from the job spec; the provider delivers it to the machine
(a file for the local provider, user-data for a cloud). The agent never reads the job spec or
the store, only this plan, so the two sides can change independently.

GPU indices in a plan are *logical*: index ``i`` is the i-th device the agent was given (the
GPUs the provider gave this instance, ``corral agent --devices``). ``devices=None`` and no
``--devices`` mean "every GPU this node has".

The plan is built once (``corral.control.plan_builder``) from the spec and the provider's node
contribution (``Provider.node_profile``); nobody edits it afterwards. Facts that only the node
knows when it starts the agent (the GPUs it allocated, where the instance keeps its state)
are launch arguments of ``corral agent``, not plan edits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corral.wire import WIRE_VERSION
from corral.wire import env as C
from corral.wire.code import CodePlan
from corral.wire.container import ContainerPlan
from corral.wire.env import DEFAULT_GRACE_SECONDS

#: the signals a stage may be stopped or asked to save with (never SIGKILL/SIGSTOP: uncatchable)
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
SignalName = Literal["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"]

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServicePlan(_Model):
    """A stage that serves until the attempt is stopped (see ``docs/agent.md``, services)."""

    ports: list[int] = Field(min_length=1)
    health: str | None = None
    public: bool = True
    #: also served at the root of the agent's port (left out when false: older agents)
    root: bool = Field(False, exclude_if=lambda v: not v)


class StagePlan(_Model):
    name: str
    run: str = Field(description="Shell command (run with bash -c in the workdir).")
    gpus: int | list[int] | Literal["all"] = Field(
        0, description="How many GPUs (any free ones), explicit logical indices, or 'all'."
    )
    needs: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    #: the machines of the gang that run the stage (ranks 0..nodes-1); left out at 1
    nodes: int = Field(1, ge=1, exclude_if=lambda v: v == 1)
    #: left out of a plan without it, so that such a plan reads as it did before services
    service: ServicePlan | None = Field(None, exclude_if=lambda v: v is None)
    progress: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Read progress from the stage's log: a preset name or a regex with named "
        "groups (corral.wire.progress_patterns).",
    )
    # how the stage is stopped (see ``docs/foreign.md``); left out at their defaults, too
    stop_signal: SignalName = Field("SIGTERM", exclude_if=lambda v: v == "SIGTERM")
    stop_grace_seconds: float | None = Field(
        None,
        ge=0,
        exclude_if=lambda v: v is None,
        description="Overrides the plan's grace_seconds for this stage (already capped).",
    )
    save_signal: SignalName | None = Field(None, exclude_if=lambda v: v is None)
    save_command: str | None = Field(None, exclude_if=lambda v: v is None)

    def grace(self, default: float) -> float:
        """Seconds from a stop request to SIGKILL for this stage."""
        return default if self.stop_grace_seconds is None else self.stop_grace_seconds

    #: appended to ``run`` when the attempt starts from a restored checkpoint
    resume_args: str | None = Field(None, exclude_if=lambda v: v is None)


class AcceptancePlan(_Model):
    metric: str
    op: Literal["<=", "<", ">=", ">", "=="]
    value: float


class ArtifactsPlan(_Model):
    paths: list[str] = Field(default_factory=list, description="Globs relative to the workdir.")
    storage: str | None = Field(None, description="Storage URI the artifacts go to.")


class EvalPlan(_Model):
    report: str | None = Field(
        None, description="JSON report the eval stage writes (workdir-relative)."
    )
    acceptance: list[AcceptancePlan] = Field(default_factory=list)
    fail_run_on_reject: bool = False


class CheckpointPolicy(_Model):
    """The job's checkpoint policy, from the spec's ``checkpoints:`` section: the retention
    that the SDK's Checkpointer and the agent's mirrors (checkpoint sync, the path mirror)
    apply alike, and the interval the SDK's CheckpointTimer aims for. The agent reads it from
    the plan and hands it to the job as the ``CORRAL_CHECKPOINT_*`` variables the SDK reads
    (:meth:`env`); nothing parses those back."""

    keep_last: int = Field(3, ge=0, description="The newest N checkpoints kept.")
    keep_best: int = Field(0, ge=0, description="Also the best N by `metric`.")
    metric: str | None = Field(None, description="The metric that ranks checkpoints.")
    mode: Literal["min", "max"] = Field("min", description="Whether lower or higher is better.")
    interval_s: float | None = Field(
        None,
        gt=0,
        description="Seconds between two checkpoints the SDK aims for (the spec's interval, or "
        "what the interruption rate and max_lost_work give); None: none given.",
    )
    interruptions_per_hour: float | None = Field(
        None, ge=0, description="The rate interval_s was worked out from (information)."
    )

    @model_validator(mode="after")
    def _metric_for_best(self) -> CheckpointPolicy:
        if self.keep_best > 0 and not self.metric:
            raise ValueError("keep_best > 0 needs a metric to rank checkpoints by")
        return self

    def env(self) -> dict[str, str]:
        """The ``CORRAL_CHECKPOINT_*`` variables of the job's processes (what the SDK reads)."""
        out = {
            C.ENV_CKPT_KEEP_LAST: str(self.keep_last),
            C.ENV_CKPT_KEEP_BEST: str(self.keep_best),
            C.ENV_CKPT_MODE: self.mode,
        }
        if self.metric:
            out[C.ENV_CKPT_METRIC] = self.metric
        if self.interval_s is not None:
            out[C.ENV_CKPT_INTERVAL] = f"{self.interval_s:g}"
        if self.interruptions_per_hour is not None:
            out[C.ENV_INTERRUPTIONS_PER_HOUR] = f"{self.interruptions_per_hour:.4g}"
        return out


class AgentPlan(_Model):
    wire_version: int = Field(
        WIRE_VERSION, description="Version of the wire contract the plan was built for."
    )
    run_id: str
    attempt: int = Field(ge=1)
    workdir: str = Field(description="Absolute directory the setup and stages run in.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment for every stage.")
    setup: list[str] = Field(default_factory=list, description="Shell commands run once, in order.")
    stages: list[StagePlan]
    nodes: int = Field(
        1,
        ge=1,
        exclude_if=lambda v: v == 1,
        description="Machines of the job's gang (left out at 1: one node).",
    )
    devices: list[str] | None = Field(
        None, description="Physical GPU ids given to this instance; None: all GPUs of the node."
    )
    checkpoint_dir: str
    state_dir: str = Field(description="Where the agent keeps logs, events and progress files.")
    skip_stages: list[str] = Field(
        default_factory=list, description="Stages that completed in an earlier attempt."
    )
    grace_seconds: float = Field(DEFAULT_GRACE_SECONDS, ge=0)
    hourly_price: float = Field(0.0, ge=0)
    cost_offset_usd: float = Field(0.0, ge=0, description="Cost of earlier attempts.")
    budget_usd: float | None = None
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    progress_event_interval: float = Field(
        10.0, gt=0, description="Seconds between two 'progress' events of one stage."
    )
    run_name: str = Field("", description="The job's name (for the manifest).")
    spec_hash: str = Field("", description="sha256 of the resolved spec (for the manifest).")
    checkpoint_storage: str | None = Field(
        None, description="Storage URI checkpoints are mirrored to and restored from."
    )
    checkpoint_paths: list[str] = Field(
        default_factory=list,
        description="Workdir-relative files, directories or globs where the job writes "
        "checkpoints of its own (mirrored to checkpoint_storage as they settle).",
    )
    checkpoint_policy: CheckpointPolicy = Field(
        default_factory=CheckpointPolicy,
        description="Retention and interval of the job's checkpoints (the spec's checkpoints).",
    )
    checkpoint_settle_s: float = Field(
        10.0,
        ge=0,
        description="Three times this long: the mirror's warnings; without /proc, unchanged "
        "for this long, a checkpoint at a path is complete.",
    )
    artifacts: ArtifactsPlan = Field(default_factory=ArtifactsPlan)
    eval: EvalPlan = Field(default_factory=EvalPlan)
    controller_timeout_s: float | None = Field(
        None,
        gt=0,
        description="After the job ended, exit if no controller call came for this long.",
    )
    shutdown_command: str | None = Field(
        None,
        description="Run when the agent exits for lack of a controller (powers a cloud machine off).",
    )
    node_hooks: list[str] = Field(
        default_factory=list,
        description="Node hooks the agent loads, as 'module:Class' references to code in the "
        "provider's own folder (a preemption-notice poller, say); see corral.wire.node.",
    )

    code: CodePlan | None = Field(
        None,
        description="Code and data the node puts in place before the setup (see "
        "corral.wire.code); None: the node sees the controller's files and runs in `workdir`.",
    )
    image: str | None = Field(
        None, description="The container image the node runs in (container providers)."
    )
    container: ContainerPlan | None = Field(
        None,
        description="The image the agent runs every setup command and stage in, through a "
        "container engine on the node (a node that is not the image: this machine, a pool "
        "worker, a VM); None: the commands run on the node as it is.",
    )

    @model_validator(mode="after")
    def _stage_nodes(self) -> AgentPlan:
        for stage in self.stages:
            if stage.nodes > self.nodes:
                raise ValueError(
                    f"stage {stage.name!r} runs on {stage.nodes} nodes of a gang of {self.nodes}"
                )
        return self

    @field_validator("node_hooks")
    @classmethod
    def _references(cls, value: list[str]) -> list[str]:
        for ref in value:
            module, sep, attr = ref.partition(":")
            if not (sep and _DOTTED.match(module) and attr.isidentifier()):
                raise ValueError(f"{ref!r} is not a 'package.module:Class' reference")
        return value

    def longest_grace(self) -> float:
        """The longest a graceful stop of the attempt's stages may take (a stage's own
        ``stop_grace_seconds`` may exceed ``grace_seconds``)."""
        return max([self.grace_seconds, *(s.grace(self.grace_seconds) for s in self.stages)])

    @classmethod
    def load(cls, path: str | Path) -> AgentPlan:
        return cls.model_validate_json(Path(path).read_text())

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2))
