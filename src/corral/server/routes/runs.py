"""Runs: submit, list, one in detail, its events, stop and cancel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from corral.server import deps
from corral.server.auth import reader, writer
from corral.service import actions, details, events, runs, submit
from corral.service.events import MAX_EVENTS
from corral.service.session import Store

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])

#: the most runs one page lists
MAX_PAGE = 1000


class SubmitRequest(BaseModel):
    """A job spec as YAML or JSON text, with ``--set``-style overrides."""

    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="the job spec, YAML or JSON text")
    overrides: list[str] = Field(default_factory=list, description="key.path=value")
    base_dir: str | None = Field(
        default=None, description="where relative paths resolve on the server (default: its cwd)"
    )


@router.post("", status_code=201, dependencies=[Depends(writer)])
def submit_run(body: SubmitRequest, store: Store = Depends(deps.store)) -> Any:
    """Validate and submit the spec; 201 with the run, its warnings and notices. A bad spec
    is a 422 whose ``fields.errors`` name each field."""
    return submit.submit_run(
        text=body.spec, base_dir=body.base_dir, overrides=body.overrides, store=store
    ).to_json()


@router.get("", dependencies=[Depends(reader)])
def list_runs(
    state: list[str] | None = Query(None, description="only runs in these states"),
    active: bool = Query(False, description="only unfinished runs"),
    limit: int = Query(50, ge=1, le=MAX_PAGE),
    offset: int = Query(0, ge=0),
    store: Store = Depends(deps.store),
) -> Any:
    """Runs newest first, ``limit`` of them from ``offset``."""
    found = runs.list_runs(
        states=state, active_only=active, limit=limit, offset=offset, store=store
    )
    return {"runs": [r.to_json() for r in found], "limit": limit, "offset": offset}


@router.get("/{ref}", dependencies=[Depends(reader)])
def get_run(ref: str, store: Store = Depends(deps.store)) -> Any:
    """One run (id, id prefix or name) with its attempts, stages, cost and acceptance."""
    return details.get_run(ref, store=store).to_json()


@router.get("/{ref}/events", dependencies=[Depends(reader)])
def run_events(
    ref: str,
    after: int = Query(0, ge=0, description="the cursor of the previous page"),
    type: list[str] | None = Query(None, description="only events of these types"),
    limit: int = Query(100, ge=1, le=MAX_EVENTS),
    store: Store = Depends(deps.store),
) -> Any:
    """The run's events with an id above ``after``, oldest first; poll with ``cursor``."""
    return events.run_events(ref, after=after, types=type, limit=limit, store=store).to_json()


@router.post("/{ref}/stop", dependencies=[Depends(writer)])
def stop_run(ref: str, store: Store = Depends(deps.store)) -> Any:
    """Ask for a graceful stop (the run ends STOPPED); 409 when it already ended."""
    return actions.stop_run(ref, store=store).to_json()


@router.post("/{ref}/cancel", dependencies=[Depends(writer)])
def cancel_run(ref: str, store: Store = Depends(deps.store)) -> Any:
    """Ask for an immediate cancel (the run ends CANCELLED); 409 when it already ended."""
    return actions.cancel_run(ref, store=store).to_json()
