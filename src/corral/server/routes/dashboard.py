"""The web dashboard: server-rendered pages (the runs table, a run's page, the login form)
and the fragments its script polls to keep them live. Every value comes from a service call;
charts are drawn in the browser from ``/api/v1/runs/{ref}/charts`` by the vendored
``static/chart.js``. Nothing is loaded from another origin.

Access: ``/login`` takes a token (``corral token create``) and keeps it in an HttpOnly,
SameSite=Strict cookie; a read-only token sees everything and its Stop and Cancel buttons are
disabled (the API refuses them anyway)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from corral.errors import CorralError, NotFound
from corral.server import deps, ui
from corral.server.auth import COOKIE, viewer
from corral.service import artifacts, details, overview, run_charts
from corral.service.caps import list_caps
from corral.service.gpu_health import GpuThresholds
from corral.service.logs import log_tail
from corral.service.monitoring import gpu_report, run_gpus
from corral.service.run_view import RunView
from corral.service.session import Store
from corral.service.tokens import TokenRejected, TokenView, authenticate
from corral.service.views import MAX_OFFSET

router = APIRouter(include_in_schema=False)
templates = ui.templates()

#: the parts of a run's page its script refreshes, each a template ``_<part>.html``
RUN_PARTS = ("header", "timeline", "logs", "gpus", "results")
#: log lines the page shows
LOG_LINES = 200
#: runs per page of the table
PAGE = 50
#: a cookie lasts this long (seconds); the token's revocation ends it at once
COOKIE_MAX_AGE = 7 * 24 * 3600


def _safe_next(target: str | None) -> str:
    """Where to go after logging in: a path of this site only."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _to_login(request: Request) -> RedirectResponse:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(here)}", status_code=303)


def _render(
    request: Request, name: str, context: dict[str, Any], status: int = 200
) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> HTMLResponse:
    return _render(request, "login.html", {"next": _safe_next(next), "error": None})


#: the largest login form read (a token is 50 characters)
MAX_FORM = 16 * 1024


async def _form(request: Request) -> dict[str, list[str]] | None:
    """The url-encoded form, or None when it is larger than :data:`MAX_FORM`."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    return parse_qs(body.decode("utf-8", "replace"))


@router.post("/login", response_model=None)
async def login(request: Request) -> Response:
    form = await _form(request)
    if form is None:
        context = {"next": "/", "error": "That form is too large."}
        return _render(request, "login.html", context, status=413)
    token = (form.get("token") or [""])[0].strip()
    target = _safe_next((form.get("next") or ["/"])[0])
    try:
        authenticate(token or None)
    except TokenRejected:
        context = {"next": target, "error": "That token is not valid (or was revoked)."}
        return _render(request, "login.html", context, status=401)
    res = RedirectResponse(target, status_code=303)
    res.set_cookie(
        COOKIE,
        token,
        max_age=COOKIE_MAX_AGE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return res


@router.post("/logout")
def logout() -> RedirectResponse:
    res = RedirectResponse("/login", status_code=303)
    res.delete_cookie(COOKIE, path="/")
    return res


def _table(request: Request, store: Store, state: list[str] | None, offset: int) -> dict[str, Any]:
    view = overview.overview(states=state, limit=PAGE, offset=offset, store=store)
    caps = list_caps(store=store).caps  # spend against each spending cap, above the runs
    return {"overview": view, "state": state or [], "offset": offset, "page": PAGE, "caps": caps}


@router.get("/", response_class=HTMLResponse, response_model=None)
def runs_page(
    request: Request,
    state: list[str] | None = Query(None),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    store: Store = Depends(deps.store),
) -> Response:
    who = viewer(request)
    if who is None:
        return _to_login(request)
    context = {"who": who, **_table(request, store, state, offset)}
    return _render(request, "runs.html", context)


@router.get("/ui/runs", response_class=HTMLResponse, response_model=None)
def runs_fragment(
    request: Request,
    state: list[str] | None = Query(None),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    store: Store = Depends(deps.store),
) -> Response:
    if viewer(request) is None:
        return JSONResponse({"code": "unauthorized", "message": "log in again"}, 401)
    return _render(request, "_runs_table.html", _table(request, store, state, offset))


def _results(ref: str, store: Store, summary: Any, ended: bool) -> dict[str, Any]:
    """The manifest in artifact storage, read only once there can be one (the agent reported
    writing it, or the run ended): a live run's page must not read the storage every 2 s."""
    if not summary and not ended:
        return {"stored": None, "stored_error": None}
    try:
        return {"stored": artifacts.artifacts(ref, store=store), "stored_error": None}
    except NotFound:
        return {"stored": None, "stored_error": None}
    except CorralError as e:
        return {"stored": None, "stored_error": e.message}


def _run_context(
    ref: str, who: TokenView, store: Store, thresholds: GpuThresholds
) -> dict[str, Any]:
    run = details.get_run(ref, store=store)
    shown = run.to_json()  # RunDetails' run fields are built at import: read them from JSON
    run_id, state = str(shown["id"]), str(shown["state"])
    timeline = run_charts.run_timeline(run_id, store=store)
    ends = [a.ended_at for a in timeline.attempts if a.ended_at] + [m.ts for m in timeline.marks]
    t1 = timeline.now if state not in ui.TERMINAL else max(ends, default=timeline.now)
    return {
        "who": who,
        "run": run,
        "reason": RunView.from_json(shown).shown_reason,
        "timeline": timeline,
        "t0": timeline.created_at,
        "t1": max(t1, timeline.created_at + 1),
        "state": state,
        "logs": log_tail(run_id, lines=LOG_LINES, store=store),
        "gpus": run_gpus(run_id, store=store, thresholds=thresholds),
        **_results(run_id, store, run.manifest, state in ui.TERMINAL),
    }


@router.get("/runs/{ref}", response_class=HTMLResponse, response_model=None)
def run_page(
    request: Request,
    ref: str,
    store: Store = Depends(deps.store),
    thresholds: GpuThresholds = Depends(deps.gpu_thresholds),
) -> Response:
    who = viewer(request)
    if who is None:
        return _to_login(request)
    try:
        context = _run_context(ref, who, store, thresholds)
    except NotFound as e:
        return _render(request, "missing.html", {"who": who, "message": e.message}, status=404)
    return _render(request, "run.html", {**context, "parts": RUN_PARTS})


@router.get("/ui/runs/{ref}")
def run_fragments(
    request: Request,
    ref: str,
    store: Store = Depends(deps.store),
    thresholds: GpuThresholds = Depends(deps.gpu_thresholds),
) -> JSONResponse:
    """Each part of the run's page, rendered again, and whether the run has ended."""
    who = viewer(request)
    if who is None:
        return JSONResponse({"code": "unauthorized", "message": "log in again"}, 401)
    context = _run_context(ref, who, store, thresholds)
    parts = {part: templates.get_template(f"_{part}.html").render(context) for part in RUN_PARTS}
    state = context["state"]
    return JSONResponse({"state": state, "terminal": state in ui.TERMINAL, "parts": parts})


@router.get("/gpus", response_class=HTMLResponse, response_model=None)
def gpus_page(
    request: Request,
    store: Store = Depends(deps.store),
    thresholds: GpuThresholds = Depends(deps.gpu_thresholds),
) -> Response:
    """Every GPU of this machine and of each running run's node, with their verdicts."""
    who = viewer(request)
    if who is None:
        return _to_login(request)
    report = gpu_report(store=store, thresholds=thresholds)
    return _render(request, "gpus.html", {"who": who, "report": report})


@router.get("/ui/gpus", response_class=HTMLResponse, response_model=None)
def gpus_fragment(
    request: Request,
    store: Store = Depends(deps.store),
    thresholds: GpuThresholds = Depends(deps.gpu_thresholds),
) -> Response:
    if viewer(request) is None:
        return JSONResponse({"code": "unauthorized", "message": "log in again"}, 401)
    report = gpu_report(store=store, thresholds=thresholds)
    return _render(request, "_gpu_report.html", {"report": report})
