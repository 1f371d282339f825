"""Each stage's part of an estimate (``corral estimate``): its hours, where they come from,
and what they cost on the offer a launch would take.

A stage's hours come from the spec (``stages[].expected_runtime``), else from the stage's own
time in earlier runs of the same spec (the same ``spec_hash``: same file, same ``--set``),
else they are unknown. A stage's time in one earlier run is the sum of the ``duration_s`` of
its ``stage.finished`` events over the run's attempts (a stage preempted and resumed counts
its time on every machine), counted only when the stage succeeded in that run; the estimate
is the median over the newest :data:`EARLIER_RUNS` runs of the spec.

Stages whose ``needs`` are done run at once on the same machine, so the machine's hours for
the stages are the longest chain of ``needs`` (:func:`longest_chain`), not their sum; it is
known only when every stage's hours are.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from corral.service.plan_views import StageEstimate
from corral.spec import JobSpec
from corral.store import Store

#: the newest runs of the spec whose stage times are read
EARLIER_RUNS = 20
#: the event that carries a stage's time on one machine (``data``: stage, state, duration_s)
STAGE_FINISHED = "stage.finished"


def _stage_seconds(store: Store, run_id: str) -> dict[str, float]:
    """Seconds each stage that succeeded in the run took, summed over its attempts."""
    spent: dict[str, float] = {}
    succeeded: set[str] = set()
    for ev in store.events(run_id, types=[STAGE_FINISHED]):
        name, seconds = ev.data.get("stage"), ev.data.get("duration_s")
        if not isinstance(name, str) or not isinstance(seconds, int | float):
            continue
        if isinstance(seconds, bool) or seconds < 0:
            continue
        spent[name] = spent.get(name, 0.0) + float(seconds)
        if ev.data.get("state") == "succeeded":
            succeeded.add(name)
    return {name: spent[name] for name in succeeded}


def earlier_stage_seconds(
    store: Store, spec_hash: str, *, runs: int = EARLIER_RUNS
) -> dict[str, list[float]]:
    """Per stage name, its seconds in each of the newest ``runs`` runs of the spec with
    ``spec_hash`` in which it succeeded (newest first)."""
    found: dict[str, list[float]] = {}
    for run in store.runs_of_spec(spec_hash, limit=runs):
        for name, seconds in _stage_seconds(store, run.id).items():
            found.setdefault(name, []).append(seconds)
    return found


def stage_estimates(
    spec: JobSpec, earlier: Mapping[str, list[float]], price_per_hour: float | None
) -> list[StageEstimate]:
    """One :class:`StageEstimate` per stage of ``spec``, in the spec's order: hours from its
    ``expected_runtime``, else the median of ``earlier[stage]``, else unknown; cost at
    ``price_per_hour`` (None: no offer would be taken)."""
    out: list[StageEstimate] = []
    for stage in spec.stage_list():
        seen = earlier.get(stage.name) or []
        if stage.expected_runtime is not None:
            hours, source, runs = stage.expected_runtime / 3600.0, "spec", 0
        elif seen:
            hours, source, runs = statistics.median(seen) / 3600.0, "earlier_runs", len(seen)
        else:
            hours, source, runs = None, "unknown", 0
        cost = None
        if hours is not None and price_per_hour is not None:
            cost = round(hours * price_per_hour, 6)
        out.append(
            StageEstimate(
                name=stage.name,
                needs=list(stage.needs),
                hours=None if hours is None else round(hours, 6),
                hours_from=source,
                runs=runs,
                cost_usd=cost,
            )
        )
    return out


def longest_chain(stages: list[StageEstimate]) -> float | None:
    """Hours of the longest chain of ``needs`` through ``stages`` (what the machine runs for,
    stages whose needs are done running at once); None when a stage's hours are unknown.
    The spec's checks guarantee the needs name stages and form no cycle."""
    if not stages or any(s.hours is None for s in stages):
        return None
    by_name = {s.name: s for s in stages}
    done: dict[str, float] = {}

    def finish(name: str) -> float:
        if name not in done:
            stage = by_name[name]
            start = max((finish(n) for n in stage.needs if n in by_name), default=0.0)
            done[name] = start + (stage.hours or 0.0)
        return done[name]

    return round(max(finish(s.name) for s in stages), 6)
