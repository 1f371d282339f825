"""Runs: submit, list, one in detail, its events, stop and cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from corral.server import deps
from corral.server.auth import reader, writer
from corral.server.openapi import READ, SHA256, WRITE, errors, pattern
from corral.service import actions, bundles, details, events, run_charts, runs, submit
from corral.service.events import MAX_EVENTS
from corral.service.runs import STATE_NAMES, STATE_PATTERN
from corral.service.session import Store
from corral.service.tokens import TokenView
from corral.service.views import MAX_OFFSET, EventPage

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])

#: the most runs one page lists
MAX_PAGE = 1000
#: an event type: dotted lowercase words (``run.state``, ``stage.finished``)
EVENT_TYPE = pattern(
    r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$", "an event type: dotted lowercase words (run.state)"
)
#: a run state, any case
STATE = pattern(STATE_PATTERN, f"a run state ({', '.join(STATE_NAMES)}; any case)")
#: the most files a bundle's ``modes`` names, and the largest file mode (``0o7777``)
MAX_MODES, MAX_MODE = 100_000, 0o7777


class CodeSent(BaseModel):
    """What a CLI packed on its own machine: the bundle it uploaded (null: code from git with
    no ``files:``), what the bundle holds, and the state of the CLI's git checkout."""

    model_config = ConfigDict(extra="forbid")

    sha256: str | None = Field(default=None, pattern=SHA256, description="the uploaded bundle")
    members: int = Field(default=0, ge=0, le=MAX_OFFSET)
    content_bytes: int = Field(default=0, ge=0, le=MAX_OFFSET)
    modes: dict[
        Annotated[str, Field(pattern=r"^[0-9]{1,6}$")], Annotated[int, Field(ge=0, le=MAX_MODE)]
    ] = Field(
        default_factory=dict,
        max_length=MAX_MODES,
        description="the files: {index in the spec: file mode}",
    )
    local_toplevel: str | None = None
    local_commit: str | None = None
    local_dirty: bool | None = None
    cached: bool = Field(default=False, description="the CLI found it packed already")

    def client_code(self) -> Any:
        """The service's :class:`corral.control.client_code.ClientCode` of it."""
        return bundles.client_code(self.model_dump())


class SubmitRequest(BaseModel):
    """A job spec as YAML or JSON text, with ``--set``-style overrides."""

    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="the job spec, YAML or JSON text")
    overrides: list[str] = Field(default_factory=list, description="key.path=value")
    base_dir: str | None = Field(
        default=None, description="where relative paths resolve on the server (default: its cwd)"
    )
    code: CodeSent | None = Field(
        default=None,
        description="the code the CLI packed and uploaded (PUT /api/v1/bundles/{sha256}): "
        "the workdir then need not be on the server",
    )


@router.post("", status_code=201, responses=errors(*WRITE, 404, 409, 503))
def submit_run(
    body: SubmitRequest,
    store: Store = Depends(deps.store),
    token: TokenView = Depends(writer),
) -> Any:
    """Validate and submit the spec; 201 with the run, its warnings and notices. A bad spec
    is a 422 whose ``fields.errors`` name each field; a launch that would pass a spending
    cap is a 409 (``spending_cap``). The run's owner is the token's name."""
    return submit.submit_run(
        owner=token.name,
        text=body.spec,
        base_dir=body.base_dir,
        overrides=body.overrides,
        store=store,
        client_code=body.code.client_code() if body.code is not None else None,
    ).to_json()


@router.get("", dependencies=[Depends(reader)], responses=errors(*READ))
def list_runs(
    state: list[Annotated[str, Field(pattern=STATE)]] | None = Query(
        None, description="only runs in these states (PENDING, RUNNING, ...; any case)"
    ),
    active: bool = Query(False, description="only unfinished runs"),
    limit: int = Query(50, ge=1, le=MAX_PAGE),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    store: Store = Depends(deps.store),
) -> Any:
    """Runs newest first, ``limit`` of them from ``offset``; ``total``: how many match."""
    page = runs.page_runs(states=state, active_only=active, limit=limit, offset=offset, store=store)
    return {
        "runs": [r.to_json() for r in page.runs],
        "limit": limit,
        "offset": offset,
        "total": page.total,
    }


@router.get("/{ref}", dependencies=[Depends(reader)], responses=errors(*READ, 404))
def get_run(ref: str, store: Store = Depends(deps.store)) -> Any:
    """One run (id, id prefix or name) with its attempts, stages, cost and acceptance."""
    return details.get_run(ref, store=store).to_json()


@router.get(
    "/{ref}/events",
    dependencies=[Depends(reader)],
    responses={200: {"model": EventPage}, **errors(*READ, 404)},
)
def run_events(
    ref: str,
    after: int = Query(0, ge=0, le=MAX_OFFSET, description="the cursor of the previous page"),
    type: list[Annotated[str, Field(pattern=EVENT_TYPE, max_length=100)]] | None = Query(
        None, description="only events of these types"
    ),
    limit: int = Query(100, ge=1, le=MAX_EVENTS),
    store: Store = Depends(deps.store),
) -> Any:
    """The run's events with an id above ``after``, oldest first; poll with ``cursor``."""
    return events.run_events(ref, after=after, types=type, limit=limit, store=store).to_json()


@router.post("/{ref}/stop", dependencies=[Depends(writer)], responses=errors(*WRITE, 404, 409))
def stop_run(ref: str, store: Store = Depends(deps.store)) -> Any:
    """Ask for a graceful stop (the run ends STOPPED); 409 when it already ended."""
    return actions.stop_run(ref, store=store).to_json()


@router.post("/{ref}/cancel", dependencies=[Depends(writer)], responses=errors(*WRITE, 404, 409))
def cancel_run(ref: str, store: Store = Depends(deps.store)) -> Any:
    """Ask for an immediate cancel (the run ends CANCELLED); 409 when it already ended."""
    return actions.cancel_run(ref, store=store).to_json()


@router.get(
    "/{ref}/charts",
    dependencies=[Depends(reader)],
    responses={200: {"model": run_charts.RunCharts}, **errors(*READ, 404)},
)
def charts(ref: str, store: Store = Depends(deps.store)) -> Any:
    """The run's loss and validation curves (x: step) from its progress events, and its cost
    over time (x: unix seconds) from its attempts."""
    return run_charts.run_charts(ref, store=store).to_json()


@router.get(
    "/{ref}/timeline",
    dependencies=[Depends(reader)],
    responses={200: {"model": run_charts.Timeline}, **errors(*READ, 404)},
)
def timeline(ref: str, store: Store = Depends(deps.store)) -> Any:
    """Every attempt with its stages' spans and how it ended, and the marks between them
    (preemption notices, recoveries, stop requests, the end); times in unix seconds."""
    return run_charts.run_timeline(ref, store=store).to_json()
