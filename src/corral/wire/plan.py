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

from pydantic import BaseModel, ConfigDict, Field, field_validator

from corral.wire import WIRE_VERSION
from corral.wire.env import DEFAULT_GRACE_SECONDS

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StagePlan(_Model):
    name: str
    run: str = Field(description="Shell command (run with bash -c in the workdir).")
    gpus: int | list[int] | Literal["all"] = Field(
        0, description="How many GPUs (any free ones), explicit logical indices, or 'all'."
    )
    needs: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


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

    @field_validator("node_hooks")
    @classmethod
    def _references(cls, value: list[str]) -> list[str]:
        for ref in value:
            module, sep, attr = ref.partition(":")
            if not (sep and _DOTTED.match(module) and attr.isidentifier()):
                raise ValueError(f"{ref!r} is not a 'package.module:Class' reference")
        return value

    @classmethod
    def load(cls, path: str | Path) -> AgentPlan:
        return cls.model_validate_json(Path(path).read_text())

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2))
