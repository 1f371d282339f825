"""One run in detail: what ``corral status`` shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from corral import paths
from corral.control.node_paths import PACKED, checkpoint_dir_of
from corral.errors import NotFound
from corral.pricing.forecast import forecast
from corral.secrets import redactor_for
from corral.service import paid_defaults
from corral.service._store import using
from corral.service.runs import current_attempt
from corral.service.views import AttemptView, RunDetails, RunView
from corral.store import AttemptRecord, RunRecord, Store
from corral.store.states import ResourceState
from corral.wire.events import CHECKPOINT_WARNING
from corral.wire.outcome import AttemptOutcome, OutcomeKind
from corral.wire.status import StageState

#: What ``get_run`` says when there is no run at all.
NO_RUNS = "no runs yet: start one with `corral launch corral.yaml`"


#: ``acceptance["status"]`` of an evaluation that never ran: the attempt ended (stopped,
#: preempted, failed) before any stage wrote the report. The agent says ``missing``.
NOT_RUN = "not_run"


def _outcome(attempt: AttemptRecord | None) -> AttemptOutcome | None:
    """The attempt's typed outcome (``data["outcome"]``); None before it ended or unreadable."""
    raw = ((attempt.data if attempt else None) or {}).get("outcome")
    try:
        return AttemptOutcome.model_validate(raw) if raw else None
    except ValidationError:
        return None


def _stages(agent: dict[str, Any], outcome: AttemptOutcome | None) -> list[Any]:
    """The agent's stage table. A stage that exited 75 (the SDK's "preempted, resume me")
    because the attempt was asked to stop (user, budget, deadline, idle) is shown
    ``stopped``: only a preemption is shown as one."""
    stages = [dict(s) if isinstance(s, dict) else s for s in agent.get("stages") or []]
    if outcome is None or outcome.kind != OutcomeKind.STOPPED:
        return stages
    for stage in stages:
        if isinstance(stage, dict) and stage.get("state") == StageState.PREEMPTED.value:
            stage["state"] = StageState.STOPPED.value
    return stages


def _acceptance(agent: dict[str, Any], outcome: AttemptOutcome | None) -> Any:
    """The agent's acceptance verdict; ``status`` :data:`NOT_RUN` when the report is missing
    because the attempt ended before its evaluation (anything but success)."""
    acc = agent.get("acceptance")
    if (
        not isinstance(acc, dict)
        or acc.get("status") != "missing"
        or outcome is None
        or outcome.kind == OutcomeKind.SUCCEEDED
    ):
        return acc
    why = f"the attempt {outcome.kind.value} before writing {acc.get('report')}"
    criteria = [{**c, "note": why} if isinstance(c, dict) else c for c in acc.get("criteria") or []]
    return {**acc, "status": NOT_RUN, "error": why, "criteria": criteria}


def acceptance_of(run: RunRecord, attempt: AttemptRecord | None) -> Any:
    """The acceptance verdict of ``run``'s attempt ``attempt`` (its current one), as
    :func:`details` shows it; None before the agent reported one."""
    return _acceptance(_agent_status(run, attempt), _outcome(attempt))


def _agent_status(run: RunRecord, attempt: AttemptRecord | None) -> dict[str, Any]:
    """The agent's last status as the controller cached it on the current attempt, secret
    values masked (the controller stores it masked; a row written before it did is not)."""
    status = dict(((attempt.data if attempt else None) or {}).get("status") or {})
    names = (run.spec or {}).get("secrets") or []
    return dict(redactor_for(n for n in names if isinstance(n, str)).redact_data(status))


def _checkpoint_dir(run: RunRecord) -> str | None:
    """Where the run keeps its checkpoints, from its stored spec (validated when the run was
    submitted: not parsed again here); None without one."""
    spec = run.spec or {}
    checkpoints = spec.get("checkpoints") or {}
    chosen = checkpoints.get("dir") if isinstance(checkpoints, dict) else None
    workdir = spec.get("workdir")
    if not isinstance(workdir, str) or not (chosen is None or isinstance(chosen, str)):
        return None
    return checkpoint_dir_of(chosen, workdir, run.id)


def _services(agent: dict[str, Any], attempt: AttemptRecord | None, run: RunRecord) -> Any:
    """The service stages with their URL (the agent's endpoint + the stage's path), while the
    run is not over; None for a run without services."""
    rows = [s for s in agent.get("services") or [] if isinstance(s, dict)]
    if not rows:
        return None
    endpoint = (attempt.endpoint if attempt else None) or ""
    live = not run.terminal and bool(endpoint)
    return [
        {
            **row,
            "url": endpoint.rstrip("/") + str(row.get("path") or "") if live else None,
            "running": bool(row.get("running")) and live,
        }
        for row in rows
    ]


def details(store: Store, run: RunRecord) -> RunDetails:
    """``run`` (a record read from ``store``) in detail."""
    attempt = current_attempt(store, run)
    agent = _agent_status(run, attempt)
    outcome = _outcome(attempt)
    return RunDetails(
        **RunView.fields_of(run),
        attempts=[AttemptView.of(a) for a in store.attempts(run.id)],
        stages=_stages(agent, outcome),
        acceptance=_acceptance(agent, outcome),
        manifest=agent.get("manifest"),
        checkpoint_sync=agent.get("checkpoint_sync"),
        logs_dir=str(paths.home() / "runs" / run.id / "logs"),
        checkpoint_dir=_checkpoint_dir(run),
        last_checkpoint=agent.get("last_checkpoint"),
        code=_code(store, run),
        services=_services(agent, attempt, run),
        checkpoint_mirror=agent.get("checkpoint_mirror"),
        warnings=_warnings(store, run),
        budget=_budget(store, run),
        forecast=_forecast(run, attempt),
        nodes=_nodes(store, run),
    )


def _nodes(store: Store, run: RunRecord) -> list[dict[str, Any]] | None:
    """The machines of a gang's current attempt (a row per node, its rank in the row's data),
    each with what it cost in this attempt: its offer's price from its row's start until it
    was gone (or now). None for a run whose attempts have one machine."""
    rows = [r for r in store.resources(run_id=run.id) if r.attempt == run.attempt]
    rows = [r for r in rows if "rank" in r.data]  # a gang's rows say their node
    if not rows:
        return None
    now = datetime.now(UTC)
    out = []
    for r in sorted(rows, key=lambda r: (r.data.get("rank", 0), r.created_at)):
        offer = r.data.get("offer") or {}
        price = float(offer.get("price_per_hour") or 0.0)
        until = r.updated_at if r.state == ResourceState.GONE else now
        out.append(
            {
                "rank": r.data.get("rank", 0),
                "instance_id": r.instance_id,
                "provider": r.provider,
                "region": offer.get("region"),
                "state": r.state,
                "kept": "kept_from" in r.data,
                "cost_usd": round(
                    price * max(0.0, (until - r.created_at).total_seconds()) / 3600, 6
                ),
            }
        )
    return out


def _forecast(run: RunRecord, attempt: AttemptRecord | None) -> dict[str, Any] | None:
    """The run's forecast (:mod:`corral.pricing.forecast`) while it runs."""
    if run.terminal or attempt is None:
        return None
    status = (attempt.data or {}).get("status")
    ahead = forecast(run.cost_usd, attempt.price_per_hour or 0.0, status)
    return ahead.to_json() if ahead is not None else None


def _budget(store: Store, run: RunRecord) -> str | None:
    """The run's money cap as ``corral status`` says it (:mod:`corral.service.paid_defaults`)."""
    events = store.events(run.id, types=[paid_defaults.BUDGET_SET])
    choice = dict(events[-1].data) if events else None
    return paid_defaults.status_line(choice, run.spec)


def _warnings(store: Store, run: RunRecord) -> list[str] | None:
    """The distinct ``checkpoint.warning`` messages of the run's attempts (None: none)."""
    out: list[str] = []
    for event in store.events(run.id, types=[CHECKPOINT_WARNING]):
        message = dict(event.data).get("message")
        if isinstance(message, str) and message not in out:
            out.append(message)
    return out or None


def _code(store: Store, run: RunRecord) -> dict[str, Any] | None:
    """What the run ships (its ``code.packed`` event): source, bundle sha256 and size, the
    git commit; None for a run whose machines share this one's files."""
    events = store.events(run.id, types=[PACKED])
    if not events:
        return None
    data = dict(events[-1].data)
    out = {k: data.get(k) for k in ("source", "sha256", "size", "members", "git", "checkout")}
    return {k: v for k, v in out.items() if v is not None}


def get_run(ref: str | None = None, *, store: Store | None = None) -> RunDetails:
    """The run named by ``ref`` (id, id prefix or name; default: the newest run) with its
    attempts, its stage table and cost, its acceptance verdict and manifest."""
    with using(store) as st:
        if ref:
            run = st.get_run(ref)
        else:
            newest = st.list_runs(limit=1)
            if not newest:
                raise NotFound(NO_RUNS)
            run = st.get_run(newest[0].id)
        return details(st, run)
