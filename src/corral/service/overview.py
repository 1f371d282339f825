"""The runs table of the dashboard: one page of runs, each with its progress (what its
current stage last reported, from the agent status the controller cached) and its acceptance
verdict, and the totals over the whole store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from corral.service._store import using
from corral.service.details import NOT_RUN, acceptance_of
from corral.service.run_view import RunView
from corral.service.runs import current_attempt, page_runs
from corral.store import AttemptRecord, Store


@dataclass(frozen=True)
class Verdict:
    """A run's acceptance verdict in a word, and why when it is not ``accepted``."""

    #: accepted, rejected, or not evaluated (the attempt ended before its evaluation ran)
    word: str
    #: the report's error or the failed criteria ("" when accepted)
    why: str


@dataclass(frozen=True)
class RunRow:
    run: RunView
    #: the current stage's last progress: stage, step, total, percent, loss (None: none yet)
    progress: dict[str, Any] | None
    #: the acceptance verdict of its current attempt (None: the spec has none, or not yet)
    verdict: Verdict | None = None

    def to_json(self) -> dict[str, Any]:
        verdict = (
            None if self.verdict is None else {"word": self.verdict.word, "why": self.verdict.why}
        )
        return {**self.run.to_json(), "progress": self.progress, "verdict": verdict}


def _failed(criterion: dict[str, Any]) -> str:
    observed, value = criterion.get("observed"), criterion.get("value")
    if not isinstance(observed, int | float) or not isinstance(value, int | float):
        return str(criterion.get("note") or f"{criterion.get('metric')} was not observed")
    return f"{criterion.get('metric')} = {observed:g} (needs {criterion.get('op')} {value:g})"


def verdict_of(acceptance: Any) -> Verdict | None:
    """``acceptance`` (the agent's result, see ``corral.agent.acceptance``) in a word."""
    if not isinstance(acceptance, dict):
        return None
    if acceptance.get("all_pass") is True:
        return Verdict(word="accepted", why="")
    rows = [c for c in acceptance.get("criteria") or [] if isinstance(c, dict)]
    why = "; ".join(_failed(c) for c in rows if not c.get("passed"))
    if acceptance.get("status") != "ok":
        why = str(acceptance.get("error") or acceptance.get("status"))
    word = "not evaluated" if acceptance.get("status") == NOT_RUN else "rejected"
    return Verdict(word=word, why=why)


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
        rows = []
        for r in page.runs:
            attempt = current_attempt(st, r)
            status = ((attempt.data if attempt else None) or {}).get("status") or {}
            verdict = None  # the run's record (its secrets) is read only for a verdict
            if status.get("acceptance"):
                verdict = verdict_of(acceptance_of(st.get_run(r.id), attempt))
            rows.append(RunRow(run=r, progress=progress_of(attempt), verdict=verdict))
        totals = st.run_totals()
    return Overview(
        rows=rows,
        total=page.total,
        offset=offset,
        by_state={t.state: t.runs for t in totals},
        cost_usd=round(sum(t.cost_usd for t in totals), 6),
    )
