"""Sweeps: the list, one sweep's leaderboard; and the dashboard's pages of them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response

from corral.errors import NotFound
from corral.server import deps
from corral.server.auth import reader, viewer
from corral.server.openapi import READ, errors
from corral.server.routes.dashboard import _render, _to_login
from corral.service.session import Store
from corral.service.sweeps import SweepList, SweepView, list_sweeps, sweep_status

router = APIRouter(prefix="/api/v1/sweeps", tags=["sweeps"])
pages = APIRouter(include_in_schema=False)

NAME = r"^[a-z0-9][a-z0-9_.-]{0,62}$"


@router.get(
    "", dependencies=[Depends(reader)], responses={200: {"model": SweepList}, **errors(*READ)}
)
def sweeps(store: Store = Depends(deps.store)) -> Any:
    """Every sweep, newest first, each with its trials."""
    return list_sweeps(store=store).to_json()


@router.get(
    "/{name}",
    dependencies=[Depends(reader)],
    responses={200: {"model": SweepView}, **errors(*READ, 404)},
)
def sweep(name: str = Path(pattern=NAME), store: Store = Depends(deps.store)) -> Any:
    """One sweep: its trials (parameters, metric, state, cost) and the best so far."""
    return sweep_status(name, store=store).to_json()


@pages.get("/sweeps", response_model=None)
def sweeps_page(request: Request, store: Store = Depends(deps.store)) -> Response:
    who = viewer(request)
    if who is None:
        return _to_login(request)
    return _render(request, "sweeps.html", {"who": who, "sweeps": list_sweeps(store=store).sweeps})


@pages.get("/sweeps/{name}", response_model=None)
def sweep_page(request: Request, name: str, store: Store = Depends(deps.store)) -> Response:
    who = viewer(request)
    if who is None:
        return _to_login(request)
    try:
        view = sweep_status(name, store=store)
    except NotFound as e:
        return _render(request, "missing.html", {"who": who, "message": e.message}, status=404)
    numeric = [
        p
        for p in (view.trials[0].params if view.trials else {})
        if all(
            isinstance(t.params.get(p), int | float) and not isinstance(t.params.get(p), bool)
            for t in view.trials
        )
    ]
    return _render(request, "sweep.html", {"who": who, "sweep": view, "numeric": numeric})
