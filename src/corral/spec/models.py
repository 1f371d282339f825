"""The sections of a job spec (everything but the top level and the stages)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from corral.spec.bounds import (
    MAX_COST_USD,
    MAX_CPUS,
    MAX_DISK_GB,
    MAX_HOURLY_PRICE_USD,
    MAX_KEEP,
    MAX_MEMORY_GB,
    MAX_NODES,
    MAX_RESTARTS,
    at_most,
    size_at_most,
)
from corral.spec.fields import (
    Acceptance,
    Duration,
    Fraction,
    HttpUrl,
    Label,
    NonNegInt,
    PositiveFloat,
    Problems,
    RelPath,
    RelPathList,
    SecretName,
    Size,
    StorageUri,
)
from corral.spec.gpus import GpuRequest
from corral.spec.suggest import did_you_mean
from corral.spec.units import describe

RECOVERY_STRATEGIES = ("same-offer", "next-cheapest")
EVENTS = (
    "run.started",
    "stage.started",
    "stage.finished",
    "progress",
    "checkpoint.saved",
    "run.recovering",
    "budget.warning",
    "budget.forecast",
    "budget.cap_warning",
    "run.finished",
    "sweep.finished",
)
ALL_EVENTS = "*"


class SpecModel(BaseModel):
    """Base of every spec model: unknown keys are errors, no silent type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _parse_spot(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in ("auto", "true", "false"):
        return {"auto": "auto", "true": True, "false": False}[value.strip().lower()]
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true, false or 'auto', got {describe(value)}")


_PROVIDER_RE = re.compile(r"^[a-z][a-z0-9_-]*$")


def _provider_name(value: object) -> str:
    if not isinstance(value, str) or not _PROVIDER_RE.match(value.strip().lower()):
        raise ValueError(
            f"invalid provider name {describe(value)} (a registered provider: see `corral providers`)"
        )
    return value.strip().lower()


ProviderName = Annotated[str, BeforeValidator(_provider_name), Label("provider name")]


class Resources(SpecModel):
    """What one machine must have (each machine, with `nodes`). Omitted keys mean "any"."""

    nodes: Annotated[int, Field(ge=1), at_most(MAX_NODES), Label("integer >= 1")] = Field(
        1,
        description="Machines the job runs on at once, as one gang, each with the resources "
        "below (GPUs, CPUs, memory and disk are per machine; the price is per machine too). "
        "Every stage process gets CORRAL_NUM_NODES, CORRAL_NODE_RANK, CORRAL_MASTER_ADDR and "
        "CORRAL_MASTER_PORT and the names torchrun, accelerate and deepspeed read (see "
        "docs/multinode.md). Only providers that can give one job this many connected "
        "machines are planned; multi-node launch itself is not available yet.",
    )

    gpus: Annotated[GpuRequest, Label("GPU request")] = Field(
        default_factory=GpuRequest,
        description="GPUs per machine: 'L40S:8', 8, 'A100:1..2' (a range), 'any:1', 'L40S' "
        "(one). Type names are case-insensitive. Default: no GPU.",
    )
    cpus: Annotated[PositiveFloat, at_most(MAX_CPUS)] | None = Field(
        None, description="Fewest CPU cores."
    )
    memory: Annotated[Size, size_at_most(MAX_MEMORY_GB)] | None = Field(
        None, description="Least memory, e.g. '32GB' (stored in GB)."
    )
    disk: Annotated[Size, size_at_most(MAX_DISK_GB)] | None = Field(
        None, description="Least disk space, e.g. '200GB' (stored in GB)."
    )
    spot: Annotated[
        bool | Literal["auto"], BeforeValidator(_parse_spot), Label("true, false or 'auto'")
    ] = Field(
        "auto",
        description="true: spot/interruptible only; false: on-demand only; 'auto': cheapest.",
    )
    max_hourly_price: Annotated[PositiveFloat, at_most(MAX_HOURLY_PRICE_USD)] | None = Field(
        None, description="Highest price per hour for the whole machine, in USD."
    )
    providers: list[ProviderName] | None = Field(
        None, min_length=1, description="Only these providers (lower-case names). Default: all."
    )
    regions: list[str] | None = Field(
        None, min_length=1, description="Only these regions. Default: all."
    )


class Checkpoints(SpecModel):
    """Where the training script's checkpoints live and which ones are kept."""

    dir: RelPath | None = Field(
        None, description="Checkpoint directory inside the workdir. Default: corral picks one."
    )
    storage: StorageUri | None = Field(
        None,
        description="Where checkpoints are synced: a local path (relative to the spec file), "
        "file:///path or s3://bucket/prefix.",
    )
    keep_last: Annotated[int, Field(ge=1), at_most(MAX_KEEP)] = Field(
        3, description="Keep the newest N checkpoints."
    )
    keep_best: Annotated[NonNegInt, at_most(MAX_KEEP)] = Field(
        0, description="Also keep the best N by `metric`."
    )
    metric: str | None = Field(None, description="Metric that ranks checkpoints for keep_best.")
    mode: Literal["min", "max"] = Field("min", description="Whether lower or higher is better.")
    max_lost_work: Duration = Field(
        600.0,
        gt=0,
        description="On a provider without a preemption notice, the most work an interruption "
        "should lose on average: the default checkpoint interval (CORRAL_CHECKPOINT_INTERVAL_S) "
        "follows from it and the provider's interruption rate.",
    )
    interval: Duration | None = Field(
        None,
        gt=0,
        description="Checkpoint interval given to the SDK (CORRAL_CHECKPOINT_INTERVAL_S); "
        "default: worked out from max_lost_work and the interruption rate.",
    )
    path: RelPathList = Field(
        default_factory=list,
        description="Checkpoints a script writes on its own (no SDK): workdir-relative files, "
        "directories or globs (`ckpt.pt`, `out/checkpoint-*`, `runs/*/weights/last.pt`; a "
        "string or a list). With `storage`, the agent mirrors each one once it is complete "
        "(no process of the job holds it open for writing and it did not change between two "
        "looks, or it was moved into place) and restores the newest complete one before the "
        "next attempt, on any machine.",
    )
    settle: Duration = Field(
        10.0,
        ge=0,
        description="After three times this long, a checkpoint at `path` that could not be "
        "copied, or a `path` that matches nothing while the job makes progress and has "
        "written a checkpoint-like file elsewhere (else after 10 min), is a warning. Where the agent cannot see open files (no /proc), a checkpoint unchanged "
        "for this long counts as complete.",
    )

    @model_validator(mode="after")
    def _metric_for_best(self) -> Checkpoints:
        if self.keep_best > 0 and not self.metric:
            raise Problems([(("keep_best",), "keep_best > 0 needs a metric to rank by")])
        for i, path in enumerate(self.path):
            if path == ".":
                raise Problems([(("path", i), "'.' is the whole workdir: name the checkpoints")])
        return self


class Artifacts(SpecModel):
    """Files collected (with a SHA256 manifest) when the run ends."""

    paths: RelPathList = Field(
        default_factory=list, description="Globs relative to the workdir, e.g. 'outputs/**'."
    )
    storage: StorageUri | None = Field(
        None, description="Where artifacts are uploaded (same forms as checkpoints.storage)."
    )


class Recovery(SpecModel):
    """What happens after a preemption or a failure."""

    max_preemption_restarts: Annotated[NonNegInt, at_most(MAX_RESTARTS)] = Field(
        10, description="Restarts after preemptions before giving up."
    )
    max_error_restarts: Annotated[NonNegInt, at_most(MAX_RESTARTS)] = Field(
        0, description="Restarts after the job failed."
    )
    recover_on_exit_codes: Annotated[
        list[Annotated[int, Field(ge=1, le=255)]], Label("list of exit codes (1-255)")
    ] = Field(
        default_factory=list,
        description="Exit codes treated as 'restart me' (75, preempted, always is).",
    )
    strategy: Literal["same-offer", "next-cheapest"] = Field(
        "same-offer",
        description="'same-offer': relaunch the same kind of machine; 'next-cheapest': avoid "
        "the region or machine that just failed.",
    )


class Budget(SpecModel):
    """Money limits, over all attempts of the run."""

    max_cost_usd: Annotated[PositiveFloat, at_most(MAX_COST_USD)] | None = Field(
        None,
        description="Stop the run (gracefully) when it has cost this much, in USD. Unset on "
        "machines that cost money: the default cap (CORRAL_DEFAULT_MAX_COST_USD, $10); null: "
        "no cap.",
    )
    warn_at: Fraction = Field(
        0.9, description="Send budget.warning at this fraction of max_cost_usd (0.9 or '90%')."
    )
    on_forecast_over: Literal["warn", "stop", "ignore"] = Field(
        "warn",
        description="When the forecast (cost so far + price x the running stages' ETA, once "
        "they are 10% of the way) passes max_cost_usd by more than 10%: 'warn' (a "
        "budget.forecast event and webhook, once), 'stop' (a graceful stop, reason budget, "
        "long before the cap is spent), or 'ignore'.",
    )


class Limits(SpecModel):
    """Time limits."""

    max_runtime: Duration | None = Field(
        None, description="Stop the run after this much time in total, e.g. '6h'."
    )
    idle_timeout: Duration | None = Field(
        None,
        description="Stop the run when nothing happens for this long, e.g. '30m': no progress, "
        "no GPU at work, the stages' CPU under 5% of a core and their memory steady. Unset on "
        "machines that cost money: 30 min (CORRAL_DEFAULT_IDLE_TIMEOUT), except for a job with "
        "a service stage; null: none.",
    )


def _event(value: object) -> str:
    if value == ALL_EVENTS or value in EVENTS:
        return str(value)
    hint = did_you_mean(value, EVENTS) if isinstance(value, str) else ""
    raise ValueError(f"unknown event {describe(value)}{hint} (known: {', '.join(EVENTS)}, or '*')")


EventName = Annotated[str, BeforeValidator(_event), Label("event name")]


class Webhook(SpecModel):
    """One HTTP endpoint that receives signed JSON events."""

    url: HttpUrl = Field(description="http:// or https:// URL the events are POSTed to.")
    secret: SecretName | None = Field(
        None, description="Name of the secret used to sign the body (HMAC-SHA256)."
    )
    events: list[EventName] = Field(
        default_factory=lambda: [ALL_EVENTS],
        min_length=1,
        description="Events to send: " + ", ".join(EVENTS) + ", or '*' for all.",
    )
    progress_interval: Duration = Field(
        60.0, description="Least time between two progress events of one stage."
    )
    format: str = Field(
        "corral",
        pattern=r"^[a-z][a-z0-9-]{0,31}$",
        description="Payload shape: 'corral' (the default), or another format the webhook "
        "sender knows, for receivers written for another service's payloads (the list: "
        "docs/webhooks.md, 'Payload formats'; checked at launch). Signing and delivery ids are "
        "the same in every format.",
    )


class Notify(SpecModel):
    """Notifications."""

    webhooks: list[Webhook] = Field(default_factory=list, description="Webhook endpoints.")


class Tracker(SpecModel):
    """An experiment tracker the run's metrics are sent to."""

    type: Literal["jsonl", "wandb", "mlflow"] = Field(description="Which tracker.")
    project: str | None = Field(None, description="Project (W&B) or experiment (MLflow) name.")
    tracking_uri: str | None = Field(None, description="MLflow tracking URI.")
    entity: str | None = Field(None, description="W&B entity (user or team).")
    mode: Literal["online", "offline"] | None = Field(None, description="W&B mode.")


class EvalSpec(SpecModel):
    """The evaluation report the user's eval stage writes, and what makes it pass."""

    report: RelPath | None = Field(
        None, description="JSON file (relative to the workdir) with metric: value pairs."
    )
    acceptance: Annotated[list[Acceptance], Label("list of expressions")] = Field(
        default_factory=list,
        description="Criteria such as 'cer_clean <= 0.03' (ops: <=, <, >=, >, ==).",
    )
    fail_run_on_reject: bool = Field(
        False, description="Mark the run FAILED when an acceptance criterion is not met."
    )

    @model_validator(mode="after")
    def _report_for_acceptance(self) -> EvalSpec:
        if self.acceptance and self.report is None:
            raise Problems([(("acceptance",), "acceptance criteria need eval.report")])
        return self
