"""``corral pool scale N`` and ``corral pool restart``: the Celery guide's ``scale 4`` and
``restart``, for the workers of this box's ``corral worker``.

The verb hands its request to ``corral worker`` through the workers' home
(:mod:`corral.queue.control`) and waits until the box is as asked: after a scale, every
worker that should run answers in the pool (registered with its process); after a restart,
every worker was stopped warm and answers again with a new process, one at a time
(:mod:`corral.queue.board`). Workers scaled down stop warm: one running an attempt finishes
it first and is reported as stopping meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from corral.errors import BadInput, CorralError, NotFound
from corral.queue.client import broker_errors, connect
from corral.queue.control import Request, SupervisorState, read_state, send, worker_home
from corral.queue.keys import Keys
from corral.queue.registry import Registry
from corral.queue.settings import PoolSettings
from corral.service.views import View

#: seconds ``corral worker`` has to take a request before the verb gives up
TAKE_TIMEOUT_S = 10.0
#: how often the verb looks
LOOK_EVERY_S = 0.1


class ScaleView(View):
    workers: int
    #: the workers that run and answer
    answering: list[str]
    #: scaled down, still finishing their attempt (warm)
    stopping: list[str]
    seconds: float


class RestartView(View):
    restarted: list[str]
    seconds: float


def _supervisor(home: Path | None) -> tuple[Path, SupervisorState]:
    base = worker_home(home)
    state = read_state(base)
    if state is None:
        raise NotFound(
            f"no `corral worker` runs on this box with its home in {base} (start one, or name "
            "its home with --home)"
        )
    return base, state


def _pool(settings: PoolSettings, state: SupervisorState) -> Registry:
    if state.pool != settings.name:
        raise BadInput(
            f"--pool {settings.name}: this box's `corral worker` serves pool {state.pool}"
        )
    with broker_errors(settings):
        return Registry(connect(settings), Keys(settings.name))


def _next_look(base: Path, during: str) -> SupervisorState:
    """The box's supervisor a moment later (an error once it is gone)."""
    time.sleep(LOOK_EVERY_S)
    state = read_state(base)
    if state is None:
        raise CorralError(f"`corral worker` on this box stopped{during}")
    return state


def _taken(base: Path, request: Request, deadline: float) -> SupervisorState:
    """Wait until ``corral worker`` applied ``request`` (or refused it)."""
    while True:
        state = read_state(base)
        if state is None:
            raise CorralError("`corral worker` on this box stopped before it took the request")
        if request.id in state.refused:
            raise BadInput(state.refused[request.id])
        if request.id in state.applied:
            return state
        if time.monotonic() > deadline:
            raise CorralError(
                f"`corral worker` (pid {state.pid}) did not take the request in {TAKE_TIMEOUT_S:g}s"
            )
        time.sleep(LOOK_EVERY_S)


def scale(
    count: int,
    settings: PoolSettings,
    home: Path | None = None,
    timeout_s: float = 120.0,
    wait: bool = True,
    say: Callable[[str], None] = lambda _line: None,
) -> ScaleView:
    """Run ``count`` workers on this box; returns once those answer (or at ``timeout_s``)."""
    began = time.monotonic()
    base, state = _supervisor(home)
    if not 0 <= count <= len(state.workers):
        names = ", ".join(w.name for w in state.workers)
        raise BadInput(
            f"scale {count}: this box has {len(state.workers)} workers, one per GPU it serves "
            f"({names}); start `corral worker` with more --gpus to go past them"
        )
    registry = _pool(settings, state)
    request = Request.scale(count)
    send(base, request)
    state = _taken(base, request, began + TAKE_TIMEOUT_S)
    said: set[str] = set()
    while True:
        live = {w.name: w.pid for w in registry.workers()}
        up = [w.name for w in state.workers if w.active and w.pid and live.get(w.name) == w.pid]
        for name in sorted(set(up) - said):
            say(f"{name} answers ({len(up)}/{count})")
            said.add(name)
        stopping = [w.name for w in state.workers if not w.active and w.pid]
        if len(up) == count or not wait:
            return ScaleView(
                workers=count,
                answering=up,
                stopping=stopping,
                seconds=round(time.monotonic() - began, 2),
            )
        if time.monotonic() - began > timeout_s:
            waiting = [w.name for w in state.workers if w.active and w.name not in up]
            raise CorralError(
                f"scale {count}: {', '.join(waiting)} did not answer in {timeout_s:g}s "
                "(`corral pool logs NAME` says why)"
            )
        state = _next_look(base, "")


def restart(
    names: list[str],
    settings: PoolSettings,
    home: Path | None = None,
    timeout_s: float = 600.0,
    say: Callable[[str], None] = lambda _line: None,
) -> RestartView:
    """A rolling, warm restart of ``names`` (every running worker when empty), one at a
    time; returns once each answers again with a new process."""
    began = time.monotonic()
    base, state = _supervisor(home)
    known = [w.name for w in state.workers]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadInput(f"restart: no worker {', '.join(unknown)} on this box ({', '.join(known)})")
    _pool(settings, state)
    before = {w.name: w.pid for w in state.workers}
    wanted = names or [w.name for w in state.workers if w.active and w.pid]
    request = Request.rolling(names)
    send(base, request)
    state = _taken(base, request, began + TAKE_TIMEOUT_S)
    at = state.restarting
    while request.id not in state.finished:
        if state.restarting != at:
            if at is not None:
                say(f"{at} restarted")
            at = state.restarting
            if at is not None:
                say(f"{at}: restarting (warm: a running attempt finishes first)")
        if time.monotonic() - began > timeout_s:
            raise CorralError(
                f"restart: still at {state.restarting or '-'} after {timeout_s:g}s (it may be "
                "finishing a run); `corral worker` goes on with the rest"
            )
        state = _next_look(base, " during the restart")
    if at is not None:
        say(f"{at} restarted")
    after = {w.name: w.pid for w in state.workers}
    done = [n for n in wanted if after.get(n) and after.get(n) != before.get(n)]
    return RestartView(restarted=done, seconds=round(time.monotonic() - began, 2))
