"""A run's stage logs: which exist, a chunk from an offset, and a live stream (server-sent
events) that follows them until the run ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict
from sse_starlette.sse import EventSourceResponse, ServerSentEvent

from corral.server import deps
from corral.server.auth import reader
from corral.server.openapi import READ, errors
from corral.service.log_hub import LogHub, Subscription
from corral.service.logs import MAX_CHUNK, log_files, read_log
from corral.service.session import Store
from corral.service.views import MAX_OFFSET, LogChunk, LogFile, LogLine

router = APIRouter(prefix="/api/v1/runs/{ref}/logs", tags=["logs"])


class LogFiles(BaseModel):
    """The run's copied stage logs (the answer without ``stage``)."""

    model_config = ConfigDict(extra="forbid")

    files: list[LogFile]


@router.get(
    "",
    dependencies=[Depends(reader)],
    responses={200: {"model": LogChunk | LogFiles}, **errors(*READ, 404)},
)
def logs(
    ref: str,
    stage: str | None = Query(None, description="read this stage's log (default: list them)"),
    attempt: int | None = Query(
        None, ge=1, le=MAX_OFFSET, description="default: the current attempt"
    ),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    max_bytes: int = Query(64 * 1024, ge=1, le=MAX_CHUNK),
    store: Store = Depends(deps.store),
) -> Any:
    """Without ``stage``: the copied stage logs and their sizes. With it: up to
    ``max_bytes`` of that log from ``offset``; ask again from ``next_offset``."""
    if stage is None:
        return {"files": [f.to_json() for f in log_files(ref, store=store)]}
    chunk = read_log(ref, stage, attempt=attempt, offset=offset, max_bytes=max_bytes, store=store)
    return chunk.to_json()


def _events(lines: list[LogLine]) -> bytes:
    """One ``log`` event per line, encoded together: one write for a poll's lines, however
    many (the server's cost per follower is mostly its writes)."""
    return b"".join(
        ServerSentEvent(data=json.dumps(line.to_json()), event="log").encode() for line in lines
    )


async def _follow(sub: Subscription, wake: asyncio.Event) -> AsyncIterator[bytes | ServerSentEvent]:
    """``log`` events (one per line) until the run has ended and its last lines are sent,
    then one ``end`` event with the run. A follower too slow to keep up is let go (the
    stream closes without ``end``)."""
    try:
        while True:
            await wake.wait()
            wake.clear()
            lines, end = sub.drain()
            if lines:
                yield _events(lines)
            if end is not None:
                yield ServerSentEvent(data=json.dumps(end.to_json()), event="end")
                return
            if sub.overflowed:
                return
    finally:
        sub.close()


#: one event of the stream: ``log`` (data: a line) or ``end`` (data: the run), JSON text
_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["log", "end"]},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}
#: the stream's success as the document shows it: server-sent events, not JSON
_EVENT_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "server-sent events: `log` (data: `{attempt, stage, ts, text}`) per "
        "line, then `end` (data: the run) once it has ended",
        # before OpenAPI 3.2 (FastAPI writes 3.1), a stream's schema describes each event
        "content": {"text/event-stream": {"schema": _EVENT}},
    }
}


@router.get(
    "/stream",
    dependencies=[Depends(reader)],
    response_class=EventSourceResponse,
    responses={**_EVENT_STREAM, **errors(*READ, 404)},
)
async def stream(
    ref: str,
    stage: list[str] | None = Query(None, description="only these stages"),
    from_end: bool = Query(False, description="skip the lines already written"),
    hub: LogHub = Depends(deps.log_hub),
) -> EventSourceResponse:
    """Server-sent events: ``log`` (``{attempt, stage, ts, text}``) for each line as the
    controller copies it, and ``end`` (the run) once it has ended; then the stream closes.
    Every follower of a run shares one reader of its logs (:mod:`corral.service.log_hub`)."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def notify() -> None:
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the server is shutting down: nobody is waiting
            pass

    sub = await anyio.to_thread.run_sync(
        lambda: hub.subscribe(ref, stages=stage, from_end=from_end, notify=notify)
    )
    return EventSourceResponse(_follow(sub, wake), ping=15)
