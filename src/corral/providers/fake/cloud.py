"""The simulated market of the fake provider: its catalog and its preemption rules.

A cloud is described by a JSON or YAML file named by ``CORRAL_FAKE_CLOUD`` (or given to the
constructor); without one, :data:`DEFAULT_CATALOG` (two regions, L40S and A100 machines of
1 and 8 GPUs, spot at about a third of on-demand) with a 1 s launch delay and no preemption. Example::

    launch_delay_s: 2          # PROVISIONING for this long, then the agent starts
    terminate_delay_s: 20      # a teardown is confirmed (and billing ends) this much later
    notice_s: 5                # SIGTERM to the agent, SIGKILL this much later
    rate_per_hour: 1.1         # random preemptions of spot machines (SaladCloud's reported rate)
    time_scale: 60             # one clock second counts as a minute for rate_per_hour
    seed: 7
    preemptions:               # and/or a schedule, in clock seconds after launch
      - {launch: 0, after_s: 30}          # the first launch of this cloud
      - {key: run123-a2, after_s: 10}     # one instance, by its launch key
    offers:
      - {id: use-l40s, region: us-east, gpu_type: L40S, gpu_count: 1,
         spot_price: 0.4, on_demand_price: 1.2, capacity: 2}

Times are in seconds of the provider's clock. ``time_scale`` applies to ``rate_per_hour`` only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from corral.errors import BadInput

#: Path of a JSON or YAML file describing the fake cloud.
ENV_FAKE_CLOUD = "CORRAL_FAKE_CLOUD"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CatalogEntry(_Model):
    """One kind of machine in one region. Sold as spot and/or on-demand (one offer each),
    both drawing on the same ``capacity``."""

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    region: str = Field(min_length=1)
    gpu_type: str | None = None
    gpu_count: int = Field(1, ge=0, le=64)
    cpus: float = Field(8.0, gt=0)
    memory_gb: float = Field(64.0, gt=0)
    spot_price: float | None = Field(None, ge=0, description="USD per hour; None: no spot offer.")
    on_demand_price: float | None = Field(
        None, ge=0, description="USD per hour; None: no on-demand offer."
    )
    capacity: int = Field(4, ge=0, description="Machines of this kind that can run at once.")
    machine: str | None = Field(
        None, description="Name of the host pool (details['machine']); default: the id."
    )

    @model_validator(mode="after")
    def _sold_somehow(self) -> CatalogEntry:
        if self.spot_price is None and self.on_demand_price is None:
            raise ValueError(f"offer {self.id!r} has neither spot_price nor on_demand_price")
        if self.gpu_count > 0 and not self.gpu_type:
            raise ValueError(f"offer {self.id!r} has GPUs but no gpu_type")
        return self


class ScheduledPreemption(_Model):
    """Preempt one spot instance ``after_s`` seconds after its launch: the ``launch``-th launch
    of this cloud (0-based, every launch counts) or the instance launched with ``key``."""

    after_s: float = Field(ge=0)
    launch: int | None = Field(None, ge=0)
    key: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> ScheduledPreemption:
        if (self.launch is None) == (self.key is None):
            raise ValueError("a scheduled preemption names exactly one of 'launch' or 'key'")
        return self


def _entry(id_: str, region: str, gpu: str, n: int, on_demand: float, cap: int) -> CatalogEntry:
    return CatalogEntry(
        id=id_,
        region=region,
        gpu_type=gpu,
        gpu_count=n,
        cpus=8.0 * n,
        memory_gb=64.0 * n,
        spot_price=round(on_demand / 3, 4),
        on_demand_price=on_demand,
        capacity=cap,
    )


DEFAULT_CATALOG: tuple[CatalogEntry, ...] = (
    _entry("use-l40s-1", "us-east", "L40S", 1, 1.20, 4),
    _entry("use-a100-1", "us-east", "A100", 1, 2.40, 2),
    _entry("use-a100-8", "us-east", "A100", 8, 19.20, 1),
    _entry("use-l40s-8", "us-east", "L40S", 8, 9.60, 1),  # the README's 8-GPU pipeline
    _entry("euw-l40s-1", "eu-west", "L40S", 1, 1.35, 4),
    _entry("euw-a100-1", "eu-west", "A100", 1, 2.70, 2),
)


class FakeCloud(_Model):
    """Everything the fake provider simulates (see the module docstring)."""

    offers: list[CatalogEntry] = Field(default_factory=lambda: list(DEFAULT_CATALOG), min_length=1)
    launch_delay_s: float = Field(1.0, ge=0, description="Seconds PROVISIONING before RUNNING.")
    terminate_delay_s: float = Field(
        0.0,
        ge=0,
        le=86400,
        description="Seconds from the first terminate request to the confirmed teardown: "
        "terminate raises NotYetTerminated until then (a slow cloud; the bill runs meanwhile).",
    )
    notice_s: float = Field(
        5.0, ge=0, description="Seconds from the preemption notice (SIGTERM) to the kill."
    )
    preemptions: list[ScheduledPreemption] = Field(default_factory=list)
    rate_per_hour: float = Field(
        0.0, ge=0, description="Random preemptions per hour of a spot machine (0: none)."
    )
    time_scale: float = Field(1.0, gt=0, description="Simulated seconds per clock second.")
    seed: int = 0
    ephemeral_disk: bool = Field(
        False,
        description="Each machine gets its own empty checkpoint directory (a preemption loses "
        "local checkpoints; only object storage brings them back). Otherwise the run's "
        "checkpoints are on the cloud's volume of the run, which each of its machines mounts.",
    )
    keep_gone_disks: bool = Field(
        False,
        description="A gone machine's disk is kept, renamed '<dir>.gone' inside the machine's "
        "own directory (which no other machine sees), for a test to inspect what the machine "
        "left behind; otherwise it is deleted.",
    )
    catalog_date: str = "simulated"

    @model_validator(mode="after")
    def _unique_ids(self) -> FakeCloud:
        seen: set[str] = set()
        for entry in self.offers:
            if entry.id in seen:
                raise ValueError(f"offer id {entry.id!r} is used twice")
            seen.add(entry.id)
        return self

    def entry(self, entry_id: str) -> CatalogEntry | None:
        return next((e for e in self.offers if e.id == entry_id), None)


def _errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or 'cloud'}: {e['msg']}"
        for e in exc.errors(include_input=False, include_url=False)
    )


def _read(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInput(f"{ENV_FAKE_CLOUD}: cannot read {path}: {exc.strerror}") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise BadInput(f"fake cloud file {path} is not valid JSON: {exc}") from None
    import yaml

    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise BadInput(f"fake cloud file {path} is not valid YAML{line}") from None


def load_cloud(source: FakeCloud | dict[str, Any] | str | Path | None = None) -> FakeCloud:
    """The cloud from ``source`` (a model, a dict, or a file path), else from the file named by
    ``CORRAL_FAKE_CLOUD``, else the defaults. A bad file or field is :class:`BadInput`."""
    if isinstance(source, FakeCloud):
        return source
    where = "fake cloud"
    if source is None:
        raw = os.environ.get(ENV_FAKE_CLOUD, "").strip()
        source = Path(raw).expanduser() if raw else {}
    if isinstance(source, str | Path):
        where = f"fake cloud file {source}"
        source = _read(Path(source))
    if not isinstance(source, dict):
        raise BadInput(f"{where}: expected a mapping of settings, got {type(source).__name__}")
    try:
        return FakeCloud.model_validate(source)
    except ValidationError as exc:
        raise BadInput(f"{where} is invalid: {_errors(exc)}") from None
