"""A run's stage logs: which exist, a chunk from an offset, and a live stream (server-sent
events) that follows them until the run ends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Query
from sse_starlette.sse import EventSourceResponse, ServerSentEvent

from corral.server import deps
from corral.server.auth import reader
from corral.service.logs import MAX_CHUNK, log_files, read_log
from corral.service.session import Store
from corral.service.watch import RunWatch, watch_run

router = APIRouter(prefix="/api/v1/runs/{ref}/logs", tags=["logs"])

#: seconds between two reads of a followed run's logs
POLL_S = 0.25


@router.get("", dependencies=[Depends(reader)])
def logs(
    ref: str,
    stage: str | None = Query(None, description="read this stage's log (default: list them)"),
    attempt: int | None = Query(None, ge=1, description="default: the current attempt"),
    offset: int = Query(0, ge=0),
    max_bytes: int = Query(64 * 1024, ge=1, le=MAX_CHUNK),
    store: Store = Depends(deps.store),
) -> Any:
    """Without ``stage``: the copied stage logs and their sizes. With it: up to
    ``max_bytes`` of that log from ``offset``; ask again from ``next_offset``."""
    if stage is None:
        return {"files": [f.to_json() for f in log_files(ref, store=store)]}
    chunk = read_log(ref, stage, attempt=attempt, offset=offset, max_bytes=max_bytes, store=store)
    return chunk.to_json()


async def _follow(watch: RunWatch) -> AsyncIterator[ServerSentEvent]:
    """``log`` events (one per line) until the run has ended and its last lines are sent,
    then one ``end`` event with the run."""
    try:
        while True:
            run, _ = await anyio.to_thread.run_sync(watch.snapshot)
            lines = await anyio.to_thread.run_sync(watch.tailer.read)
            for line in lines:
                yield ServerSentEvent(data=json.dumps(line.to_json()), event="log")
            if run.terminal:  # the controller copies the last lines before the end state
                for line in await anyio.to_thread.run_sync(watch.tailer.read):
                    yield ServerSentEvent(data=json.dumps(line.to_json()), event="log")
                yield ServerSentEvent(data=json.dumps(run.to_json()), event="end")
                return
            await anyio.sleep(POLL_S)
    finally:
        watch.close()


@router.get("/stream", dependencies=[Depends(reader)])
def stream(
    ref: str,
    stage: list[str] | None = Query(None, description="only these stages"),
    from_end: bool = Query(False, description="skip the lines already written"),
    store: Store = Depends(deps.store),
) -> EventSourceResponse:
    """Server-sent events: ``log`` (``{attempt, stage, ts, text}``) for each line as the
    controller copies it, and ``end`` (the run) once it has ended; then the stream closes."""
    watch = watch_run(ref, stages=stage, from_end=from_end, store=store)
    return EventSourceResponse(_follow(watch), ping=15)
