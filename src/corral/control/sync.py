"""Copy what the agent knows into the controller's home: events into the store, stage logs
into ``runs/<id>/logs/a<attempt>/<stage>.log``, its status onto the attempt.

Nothing from the agent is stored with a secret value in it: events, log bytes and the status
(progress metrics and notes, hook extras such as the manifest, the reason an attempt ended)
pass through the run's redactor first (values, and dict keys such as a metric's name, become
``***``; :func:`corral.secrets.redactor_for`).

The agent's byte offset reached for each stage log is kept beside the copy, so a restarted
controller continues where it stopped.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from corral import paths
from corral.control.context import Context, log
from corral.control.cost import run_cost
from corral.errors import AgentError
from corral.files import write_atomic
from corral.secrets.redact import Redactor, redactor_for
from corral.store.records import RunRecord
from corral.wire.status import AgentStatus

if TYPE_CHECKING:  # annotations only: httpx stays off the CLI launch path
    from corral.control.agent_client import AgentClient


def logs_dir(run_id: str, attempt: int) -> Path:
    d = paths.run_dir(run_id) / "logs" / f"a{attempt}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _read_offset(path: Path) -> int:
    marker = path.with_name("." + path.name + ".offset")
    try:
        return int(marker.read_text())
    except (OSError, ValueError):
        return path.stat().st_size if path.exists() else 0


def _write_offset(path: Path, offset: int) -> None:
    marker = path.with_name("." + path.name + ".offset")
    write_atomic(marker, str(offset), mode=0o644, fsync=False)


def sync_logs(ctx: Context, run_id: str, attempt: int, client: AgentClient) -> None:
    """Append new log bytes of every stage. The remote offset is kept beside each file (a
    crash between the append and the offset update repeats at most one chunk). Secret
    values are ``***`` in the copy (corral.secrets)."""
    target = logs_dir(run_id, attempt)
    redactor = None
    for stage, remote_size in client.log_sizes().items():
        path = target / f"{Path(stage).name}.log"
        offset = _read_offset(path)
        budget = ctx.settings.log_chunk
        while offset < remote_size and budget > 0:
            chunk = client.logs(stage, offset=offset, limit=min(budget, 256 * 1024))
            nxt = int(chunk.get("next_offset", offset))
            if nxt <= offset:
                break
            if redactor is None:
                redactor = _redactor(ctx, run_id)
            # chunks end at a line end, so a secret value is never split across two of them
            data = redactor.redact(chunk.get("data", "")).encode("utf-8")
            with open(path, "ab") as f:
                f.write(data)
            _write_offset(path, nxt)
            budget -= nxt - offset
            offset = nxt


def _redactor(ctx: Context, run_id: str) -> Redactor:
    """Every secret value in play, the run's spec ``secrets:`` included (for a controller
    restarted since the launch, which has not resolved them itself)."""
    return redactor_for(ctx.spec(ctx.store.get_run(run_id)).secrets)


def redact_status(redactor: Redactor, status: AgentStatus) -> AgentStatus:
    """``status`` with every secret value (and dict key) masked. Should masking break the
    status's shape (a secret equal to a phase name, say) the status is kept as it was for the
    decisions of this tick; it is never stored that way (:func:`poll_agent`)."""
    try:
        return AgentStatus.model_validate(redactor.redact_data(status.as_dict()))
    except ValidationError:
        return status


def _describe(ev: dict[str, Any]) -> str:
    t = ev.get("type", "")
    stage = ev.get("stage")
    d = ev.get("data") or {}
    if t == "stage.started":
        gpus = d.get("gpus")
        return f"stage '{stage}' started" + (f" on GPUs {','.join(gpus)}" if gpus else "")
    if t == "stage.finished":
        state = d.get("state", "finished")
        code = d.get("exit_code")
        dur = d.get("duration_s")
        text = f"stage '{stage}' {state}"
        if code not in (None, 0):
            text += f" (exit code {code})"
        if isinstance(dur, (int, float)):
            text += f" after {dur:.1f}s"
        return text
    if t == "progress":
        step, total = d.get("step"), d.get("total")
        text = f"{stage}: step {step}" + (f"/{total}" if total else "")
        percent, loss = d.get("percent"), d.get("loss")
        if isinstance(percent, (int, float)) and not isinstance(percent, bool):
            text += f" ({percent:.0f}%)"
        if isinstance(loss, (int, float)) and not isinstance(loss, bool):
            text += f" loss {loss:.4g}"
        elif isinstance(loss, str) and loss:  # "nan", "inf", "-inf": a diverged loss
            text += f" loss {loss[:16]}"
        return text
    if t == "checkpoint.saved":
        return f"{stage}: checkpoint at step {d.get('step')}"
    if t == "attempt.finished":
        return f"attempt ended: {d.get('phase')}" + (
            f" ({d.get('reason')})" if d.get("reason") else ""
        )
    return d.get("message") or d.get("reason") or t


def sync_events(ctx: Context, run_id: str, attempt: int, client: AgentClient, cursor: int) -> int:
    """Copy agent events after ``cursor`` into the store (secret values masked); returns the
    new cursor."""
    redactor = _redactor(ctx, run_id)
    while True:
        page = client.events(after=cursor)
        events = page.get("events") or []
        if not events:
            return cursor
        batch = []
        for ev in events:
            data = dict(ev.get("data") or {})
            if ev.get("stage"):
                data.setdefault("stage", ev["stage"])
            data["agent_seq"] = ev.get("seq")
            data["agent_ts"] = ev.get("ts")
            batch.append(
                {
                    "type": str(ev.get("type", "agent")),
                    "reason": redactor.redact(_describe(ev)),
                    "data": redactor.redact_data(data),
                }
            )
        cursor = int(page.get("next") or events[-1].get("seq") or cursor)
        ctx.store.append_agent_events(run_id, attempt, batch, cursor=cursor)


def poll_agent(
    ctx: Context, run: RunRecord, client: AgentClient, status: AgentStatus
) -> AgentStatus:
    """Copy events and logs, cache the agent's status on the attempt
    (``attempt.data["status"]``), note completed stages, update the run's cost. Returns the
    status with secret values masked: what the caller decides the attempt's end from, so its
    reason is stored clean too.

    Nothing is written for a steady run: the status only when it differs from the cached one,
    the run only for new completed stages or a cost change, and the cost is worked out at most
    every ``Settings.cost_update_s`` seconds unless the status changed (events and log bytes
    are written only when there are new ones)."""
    redactor = _redactor(ctx, run.id)
    clean = redact_status(redactor, status)
    attempt = ctx.store.get_attempt(run.id, run.attempt)
    try:
        sync_events(ctx, run.id, run.attempt, client, attempt.events_cursor or 0)
        sync_logs(ctx, run.id, run.attempt, client)
    except AgentError as e:
        log.info("run %s: sync interrupted: %s", run.id, e.message)
    done = status.succeeded_stages()  # the names the agent knows the stages by
    completed = list(run.completed_stages or [])
    new = [s for s in done if s not in completed]
    fields: dict[str, Any] = {}
    if new:
        fields["completed_stages"] = completed + new
    stored = redactor.redact_data(clean.as_dict())
    data = attempt.data or {}
    changed = data.get("status") != stored
    if changed:
        ctx.store.update_attempt(run.id, run.attempt, data={**data, "status": stored})
    if changed or new or _cost_due(ctx, run.id):
        ctx.memo[_cost_key(run.id)] = ctx.clock()
        cost = run_cost(ctx, run.id)
        if cost != run.cost_usd:
            fields["cost_usd"] = cost
    if fields:
        ctx.store.update_run(run.id, **fields)
    return clean


def _cost_key(run_id: str) -> str:
    return f"{run_id}:cost_at"  # a memo key: Context.forget drops it with the run


def _cost_due(ctx: Context, run_id: str) -> bool:
    """Whether the run's cost was last worked out ``Settings.cost_update_s`` or more ago (or
    never, in this controller)."""
    last = ctx.memo.get(_cost_key(run_id))
    if not isinstance(last, datetime):
        return True
    return (ctx.clock() - last).total_seconds() >= ctx.settings.cost_update_s
