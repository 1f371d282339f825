"""One run in detail: what ``corral status`` shows."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from corral import paths
from corral.control.plan_builder import checkpoint_dir
from corral.errors import CorralError, NotFound
from corral.secrets import redactor_for
from corral.service._store import using
from corral.service.runs import current_attempt
from corral.service.views import AttemptView, RunDetails, RunView
from corral.spec import JobSpec
from corral.store import RunRecord, Store

#: What ``get_run`` says when there is no run at all.
NO_RUNS = "no runs yet: start one with `corral launch corral.yaml`"


def _agent_status(store: Store, run: RunRecord) -> dict[str, Any]:
    """The agent's last status as the controller cached it on the current attempt, secret
    values masked (the controller stores it masked; a row written before it did is not)."""
    attempt = current_attempt(store, run)
    status = dict(((attempt.data if attempt else None) or {}).get("status") or {})
    names = (run.spec or {}).get("secrets") or []
    return dict(redactor_for(n for n in names if isinstance(n, str)).redact_data(status))


def _checkpoint_dir(run: RunRecord) -> str | None:
    """Where the run keeps its checkpoints; None without a valid spec."""
    if not run.spec:
        return None
    try:
        return checkpoint_dir(JobSpec.model_validate(run.spec), run.id)
    except (ValidationError, CorralError, ValueError):
        return None


def details(store: Store, run: RunRecord) -> RunDetails:
    """``run`` (a record read from ``store``) in detail."""
    agent = _agent_status(store, run)
    return RunDetails(
        **RunView.fields_of(run),
        attempts=[AttemptView.of(a) for a in store.attempts(run.id)],
        stages=list(agent.get("stages") or []),
        acceptance=agent.get("acceptance"),
        manifest=agent.get("manifest"),
        checkpoint_sync=agent.get("checkpoint_sync"),
        logs_dir=str(paths.home() / "runs" / run.id / "logs"),
        checkpoint_dir=_checkpoint_dir(run),
    )


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
