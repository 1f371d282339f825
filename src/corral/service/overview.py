"""The runs table of the dashboard: one page of runs, each with its progress (what its
current stage last reported, from the agent status the controller cached), and the totals
over the whole store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from corral.service._store import using
from corral.service.run_view import RunView
from corral.service.runs import current_attempt, page_runs
from corral.store import AttemptRecord, Store


@dataclass(frozen=True)
class RunRow:
    run: RunView
    #: the current stage's last progress: stage, step, total, percent, loss (None: none yet)
    progress: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {**self.run.to_json(), "progress": self.progress}


@dataclass(frozen=True)
class Overview:
    rows: list[RunRow]
    #: runs matching the filters in all (this page and the others)
    total: int
    offset: int
    #: every run in the store by state, and their cost together
    by_state: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [r.to_json() for r in self.rows],
            "total": self.total,
            "offset": self.offset,
            "by_state": self.by_state,
            "cost_usd": self.cost_usd,
        }


def progress_of(attempt: AttemptRecord | None) -> dict[str, Any] | None:
    """The progress of the attempt's running stage (else of its last stage that reported)."""
    status = ((attempt.data if attempt else None) or {}).get("status") or {}
    stages = [s for s in status.get("stages") or [] if isinstance(s, dict)]
    reported = [s for s in stages if isinstance(s.get("progress"), dict)]
    if not reported:
        return None
    running = [s for s in reported if s.get("state") == "running"]
    stage = (running or reported)[-1]
    p = stage["progress"]
    return {
        "stage": stage.get("name"),
        "step": p.get("step"),
        "total": p.get("total"),
        "percent": p.get("percent"),
        "loss": p.get("loss"),
    }


def overview(
    *,
    states: Iterable[str] | None = None,
    limit: int = 50,
    offset: int = 0,
    store: Store | None = None,
) -> Overview:
    """One page of runs, newest first, with their progress, and the store's totals."""
    with using(store) as st:
        page = page_runs(states=states, limit=limit, offset=offset, store=st)
        rows = [RunRow(run=r, progress=progress_of(current_attempt(st, r))) for r in page.runs]
        totals = st.run_totals()
    return Overview(
        rows=rows,
        total=page.total,
        offset=offset,
        by_state={t.state: t.runs for t in totals},
        cost_usd=round(sum(t.cost_usd for t in totals), 6),
    )
