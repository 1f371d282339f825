"""Copy what the agent knows into the controller's home: events into the store, stage logs
into ``runs/<id>/logs/a<attempt>/<stage>.log``, its status onto the attempt.

Nothing from the agent is stored with a secret value in it: events, log bytes and the status
(progress metrics and notes, hook extras such as the manifest, the reason an attempt ended)
pass through the run's redactor first (values, and dict keys such as a metric's name, become
``***``; :func:`corral.secrets.redactor_for`).

One ``GET /poll`` brings the status, the events after the controller's cursor and the new
bytes of every stage log (:mod:`corral.wire.poll`). The agent's byte offset reached for each stage log is
kept beside the copy and the event cursor on the attempt, so a restarted controller continues
where it stopped; while it runs, both are kept in memory too (:class:`PollState`), so a poll
reads nothing first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from corral import paths
from corral.control.context import Context
from corral.control.cost import run_cost
from corral.errors import NotFound
from corral.secrets.redact import Redactor, redactor_for
from corral.store.records import RunRecord
from corral.wire.events import AgentEvent
from corral.wire.status import AgentStatus

if TYPE_CHECKING:  # annotations only: httpx stays off the CLI launch path
    from corral.control.agent_client import AgentClient


def logs_dir(run_id: str, attempt: int) -> Path:
    d = paths.run_dir(run_id) / "logs" / f"a{attempt}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _offset_marker(path: Path) -> Path:
    return path.with_name("." + path.name + ".offset")


def _read_offset(path: Path) -> int:
    try:
        return int(_offset_marker(path).read_text())
    except (OSError, ValueError):
        return path.stat().st_size if path.exists() else 0


def _write_offset(path: Path, offset: int) -> None:
    """The agent offset the copy ``path`` has reached, written over the marker in place
    (one 20-byte write at its start: no temporary file and rename on every poll)."""
    fd = os.open(_offset_marker(path), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, f"{offset:020d}".encode(), 0)
    finally:
        os.close(fd)


@dataclass(slots=True)
class PollState:
    """What the controller holds of one attempt's copy, so that a poll reads nothing from
    the store or the disk first: the agent's event cursor, each stage log's agent offset
    reached, and the status last stored on the attempt. Built from the store and the offset
    files on first use (a restarted controller goes on where the last one stopped)."""

    attempt: int
    directory: Path
    cursor: int
    offsets: dict[str, int]
    #: ``attempt.data["status"]`` as last written (or read)
    stored: dict[str, Any] | None
    #: the phase and each stage's state at the last look (the schedule looks again soon
    #: after a change; log lines and progress alone do not count)
    shape: tuple[Any, ...] | None = None
    #: the agent's status as last recorded, as it came and masked: an unchanged answer is
    #: not masked and compared again
    seen: tuple[AgentStatus, AgentStatus] | None = None
    #: when ``seen`` was last answered (the context's clock): the GPU history records a
    #: node's GPUs from a fresh answer only
    seen_at: datetime | None = None


def poll_state(ctx: Context, run: RunRecord, attempt: int | None = None) -> PollState:
    """The run's :class:`PollState` for ``attempt`` (default: its current one), kept in
    ``Context.polls`` (one attempt per run: another attempt's replaces it)."""
    number = run.attempt if attempt is None else attempt
    state = ctx.polls.get(run.id)
    if isinstance(state, PollState) and state.attempt == number:
        return state
    try:
        row = ctx.store.get_attempt(run.id, number)
        cursor, stored = row.events_cursor or 0, (row.data or {}).get("status")
    except NotFound:
        cursor, stored = 0, None
    directory = logs_dir(run.id, number)
    offsets = {p.stem: _read_offset(p) for p in directory.glob("*.log")}
    state = PollState(number, directory, cursor, offsets, stored)
    ctx.polls[run.id] = state
    return state


@dataclass(frozen=True, slots=True)
class Pulled:
    """What one look at the agent brought: its status (secret values not yet masked), whether
    new events or log bytes were copied, and whether the agent holds more than it sent."""

    status: AgentStatus
    news: bool = False
    more: bool = False


def pull(ctx: Context, run: RunRecord, client: AgentClient) -> Pulled:
    """Ask the agent for its status, new events and new log bytes (one ``GET /poll``) and
    copy the events and log bytes (masked) into the store and the log copies. Raises
    AgentError when the agent does not answer."""
    state = poll_state(ctx, run)
    answer = client.poll(state.cursor, state.offsets, _log_limit(ctx))
    redactor = _redactor(ctx, run) if answer.events or answer.logs else None
    news = _copy_events(ctx, run, state, answer.events, answer.events_next, redactor)
    for stage, c in answer.logs.items():
        appended = _append_log(ctx, run, state, stage, c.offset, c.next_offset, c.data, redactor)
        news = news or appended
    return Pulled(answer.status, news=news, more=answer.more)


def drain(ctx: Context, run: RunRecord, client: AgentClient, *, rounds: int = 16) -> None:
    """Copy what the agent still holds (events, log bytes), up to ``rounds`` polls; the
    status is not looked at. Before teardown: the machine's last words."""
    state = poll_state(ctx, run)
    for _ in range(rounds):
        answer = client.poll(state.cursor, state.offsets, _log_limit(ctx))
        _copy_events(ctx, run, state, answer.events, answer.events_next)
        for stage, chunk in answer.logs.items():
            _append_log(ctx, run, state, stage, chunk.offset, chunk.next_offset, chunk.data)
        if not answer.more:
            return


#: ``GET /poll``'s event cursor that asks for no event (a gang's other nodes: their logs only)
NO_EVENTS = 2**62


def node_log_dir(run_id: str, attempt: int, rank: int) -> Path:
    """Where the stage logs of node ``rank`` of a gang are copied (the head's are the
    attempt's own, :func:`logs_dir`)."""
    d = logs_dir(run_id, attempt) / f"node{rank}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def copy_node_logs(
    ctx: Context, run: RunRecord, rank: int, client: AgentClient, *, rounds: int = 1
) -> None:
    """Copy the new stage log bytes of node ``rank`` of the run's gang (a node other than the
    head: its events are the head's too, so none are copied), masked like the head's; up to
    ``rounds`` polls (more: before teardown, its last words)."""
    states = ctx.notes(run.id).attempt(run.attempt).node_logs
    state = states.get(rank)
    if not isinstance(state, PollState):
        directory = node_log_dir(run.id, run.attempt, rank)
        offsets = {p.stem: _read_offset(p) for p in directory.glob("*.log")}
        state = states[rank] = PollState(run.attempt, directory, NO_EVENTS, offsets, None)
    redactor = _redactor(ctx, run)
    for _ in range(rounds):
        answer = client.poll(NO_EVENTS, state.offsets, _log_limit(ctx))
        for stage, chunk in answer.logs.items():
            _append_log(
                ctx, run, state, stage, chunk.offset, chunk.next_offset, chunk.data, redactor
            )
        if not answer.more:
            return


def _log_limit(ctx: Context) -> int:
    from corral.wire.poll import DEFAULT_LOG_LIMIT

    return max(1, min(ctx.settings.log_chunk, 16 * DEFAULT_LOG_LIMIT))


def _append_log(
    ctx: Context,
    run: RunRecord,
    state: PollState,
    stage: str,
    offset: int,
    nxt: int,
    data: str,
    redactor: Redactor | None = None,
) -> bool:
    """Append one chunk of a stage log (bytes ``offset`` to ``nxt`` of the agent's file) to
    the copy, masked; a chunk that does not start where the copy ends is dropped (the next
    poll asks again from the right place). True if bytes were appended."""
    name = Path(stage).name
    if nxt <= offset or offset != state.offsets.get(name, 0):
        return False
    path = state.directory / f"{name}.log"
    # chunks end at a line end, so a secret value is never split across two of them
    clean = (redactor if redactor is not None else _redactor(ctx, run)).redact(data).encode()
    with open(path, "ab") as f:
        f.write(clean)
    _write_offset(path, nxt)
    state.offsets[name] = nxt
    return True


def _redactor(ctx: Context, run: RunRecord) -> Redactor:
    """Every secret value in play, the run's spec ``secrets:`` included (for a controller
    restarted since the launch, which has not resolved them itself). Asked afresh for each
    look (a secret set since the last look is masked at once)."""
    return redactor_for(ctx.spec(run).secrets)


def redact_status(redactor: Redactor, status: AgentStatus) -> AgentStatus:
    """``status`` with every secret value (and dict key) masked. Should masking break the
    status's shape (a secret equal to a phase name, say) the status is kept as it was for the
    decisions of this tick; it is never stored that way (:func:`record_status`)."""
    try:
        return AgentStatus.model_validate(redactor.redact_data(status.as_dict()))
    except ValidationError:
        return status


def _describe(ev: AgentEvent) -> str:
    t, stage, d = ev.type, ev.stage, ev.data
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
        eta = d.get("eta_s")
        if isinstance(eta, (int, float)) and not isinstance(eta, bool) and 0 < eta < 1e9:
            text += f" ETA {int(eta) // 3600}h{int(eta) % 3600 // 60:02d}m{int(eta) % 60:02d}s"
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


def _copy_events(
    ctx: Context,
    run: RunRecord,
    state: PollState,
    events: list[AgentEvent],
    nxt: int,
    redactor: Redactor | None = None,
) -> bool:
    """Store agent events (secret values masked) and the cursor after them, in one
    transaction; True if there were any."""
    if not events:
        return False
    redactor = redactor if redactor is not None else _redactor(ctx, run)
    batch = []
    for ev in events:
        data = dict(ev.data)
        if ev.stage:
            data.setdefault("stage", ev.stage)
        data["agent_seq"] = ev.seq
        data["agent_ts"] = ev.ts
        batch.append(
            {
                "type": ev.type,
                "reason": redactor.redact(_describe(ev)),
                "data": redactor.redact_data(data),
            }
        )
    cursor = nxt or events[-1].seq
    ctx.store.append_agent_events(run.id, state.attempt, batch, cursor=cursor)
    state.cursor = cursor
    return True


def record_status(ctx: Context, run: RunRecord, status: AgentStatus) -> AgentStatus:
    """Cache the agent's status on the attempt (``attempt.data["status"]``), note completed
    stages, update the run's cost. Returns the status with secret values masked: what the
    caller decides the attempt's end from, so its reason is stored clean too.

    Nothing is written for a steady run: the status only when it differs from the one last
    stored, the run only for new completed stages or a cost change, and the cost is worked
    out at most every ``Settings.cost_update_s`` seconds unless the status changed."""
    state = poll_state(ctx, run)
    state.seen_at = ctx.clock()
    if state.seen is not None and state.seen[0] == status and not _cost_due(ctx, run.id):
        return state.seen[1]  # a steady run: nothing to mask, compare or write
    redactor = _redactor(ctx, run)
    clean = redact_status(redactor, status)
    done = status.succeeded_stages()  # the names the agent knows the stages by
    completed = list(run.completed_stages or [])
    new = [s for s in done if s not in completed]
    fields: dict[str, Any] = {}
    if new:
        fields["completed_stages"] = completed + new
    stored = redactor.redact_data(clean.as_dict())
    changed = state.stored != stored
    if changed:
        data = ctx.store.get_attempt(run.id, run.attempt).data or {}
        if data.get("status") != stored:
            ctx.store.update_attempt(run.id, run.attempt, data={**data, "status": stored})
        state.stored = stored
    if changed or new or _cost_due(ctx, run.id):
        ctx.notes(run.id).cost_at = ctx.clock()
        cost = run_cost(ctx, run.id, steady=None if changed or new else run.attempt)
        if cost != run.cost_usd:
            fields["cost_usd"] = cost
    if fields:
        ctx.store.update_run(run.id, **fields)
    state.seen = (status, clean)
    return clean


def _cost_due(ctx: Context, run_id: str) -> bool:
    """Whether the run's cost was last worked out ``Settings.cost_update_s`` or more ago (or
    never, in this controller)."""
    last = ctx.notes(run_id).cost_at
    if last is None:
        return True
    return (ctx.clock() - last).total_seconds() >= ctx.settings.cost_update_s
