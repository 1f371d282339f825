"""One run as listed (``corral ls --json``, ``corral launch --json``): a frozen dataclass,
free of pydantic, because listing a thousand runs must not pay for importing it.

Its JSON (``to_json()``) is the run's columns without its spec and lease, plus
``duration_s``, in the table's order, with datetimes as ``isoformat()`` (``...+00:00``): what
the CLI printed before the service existed. ``views.RunDetails`` carries the same fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from corral.service.timing import run_duration
from corral.store.records import RunRecord
from corral.store.states import TERMINAL_STATES

#: how the controller's transition to RUNNING words its reason (control/monitor.py)
_AGENT_READY = "agent ready on "


@dataclass(frozen=True, slots=True, kw_only=True)
class RunView:
    id: str
    name: str
    state: str
    reason: str
    outcome: str | None
    requested_action: str | None
    spec_hash: str
    spec_path: str
    workdir: str
    provider: str | None
    attempt: int
    cost_usd: float
    exit_code: int | None
    failed_stage: str | None
    completed_stages: list[str]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def fields_of(cls, run: RunRecord, now: datetime | None = None) -> dict[str, Any]:
        """The view's values for ``run`` (``duration_s`` until ``now``), by field name."""
        values = {f.name: getattr(run, f.name) for f in FIELDS if f.name != "duration_s"}
        values["completed_stages"] = list(values["completed_stages"] or [])
        values["duration_s"] = run_duration(run, now)
        return values

    @classmethod
    def of(cls, run: RunRecord, now: datetime | None = None) -> RunView:
        return cls(**cls.fields_of(run, now))

    @property
    def shown_reason(self) -> str:
        """The reason as a person reads it in a list of runs: the controller's own
        bookkeeping ("agent ready on local") replaced by what it means for the run."""
        if self.reason.startswith(_AGENT_READY) and self.state == "RUNNING":
            where = self.provider or self.reason[len(_AGENT_READY) :]
            again = f"attempt {self.attempt} " if self.attempt > 1 else ""
            return f"{again}running on {where}"
        return self.reason

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunView:
        """The view back from its :meth:`to_json` document (what ``corral server`` sends):
        datetimes parsed, unknown keys ignored (a newer server may send more)."""
        values: dict[str, Any] = {}
        for f in FIELDS:
            value = data.get(f.name)
            if f.name in _DATETIMES and isinstance(value, str):
                value = datetime.fromisoformat(value)
            values[f.name] = value
        values["completed_stages"] = list(values["completed_stages"] or [])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready document (datetimes as ISO 8601 with ``+00:00``)."""
        out: dict[str, Any] = {}
        for f in FIELDS:
            value = getattr(self, f.name)
            out[f.name] = value.isoformat() if isinstance(value, datetime) else value
        return out


FIELDS: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(RunView)
_DATETIMES = frozenset({"created_at", "updated_at", "started_at", "finished_at"})
