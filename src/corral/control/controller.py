"""The controller: a reconcile loop over the active runs in the store.

Every tick, each active run moves one step toward its goal, from the state recorded in the
store and the answers of providers and agents. Nothing the loop needs lives only in memory, so
a controller killed with -9 and started again re-attaches to the running agents and never
launches an attempt twice (see ``launching`` for the intent log that makes launch safe).
One run's failure never stops the loop: it is logged and recorded as an event.
"""

from __future__ import annotations

import signal
import threading
import time
import traceback
from collections.abc import Callable

from corral.control import actions, finishing, launching, monitor, transitions
from corral.control.context import Context, log
from corral.control.observe import Observation
from corral.control.transitions import Transition
from corral.control.watchers import run_watchers
from corral.errors import CorralError
from corral.store.records import RunRecord
from corral.store.states import RunState

Handler = Callable[[Context, RunRecord, Observation], Transition | None]

#: the handler of each active state: where the run goes next (None: it stays this tick)
HANDLERS: dict[RunState, Handler] = {
    RunState.PENDING: lambda ctx, run, obs: launching.next_attempt(ctx, run),
    RunState.PROVISIONING: monitor.handle_provisioning,
    RunState.RUNNING: monitor.handle_running,
    RunState.RECOVERING: lambda ctx, run, obs: finishing.handle_recovering(ctx, run),
    RunState.STOPPING: lambda ctx, run, obs: finishing.handle_stopping(ctx, run),
}

#: how many transitions one run may take in one tick (RUNNING -> RECOVERING -> PROVISIONING
#: -> STOPPING -> terminal is the longest chain)
MAX_STEPS = 4


def reconcile(ctx: Context, run: RunRecord) -> None:
    """One step of one run: the user's request if there is one, else the watchers, else the
    handler of its state; the step decided is applied (``transitions.apply``), and a stop
    or a recovery it starts (``Transition.follow``) goes on at once."""
    obs = Observation(ctx, run)
    if run.requested_action:
        step = actions.handle_request(ctx, run)
    else:
        step = run_watchers(ctx, run, obs)
        handler = HANDLERS.get(RunState(run.state))
        if step is None and handler is not None:
            step = handler(ctx, run, obs)
    carry_out(ctx, run, step)


def start_attempt(ctx: Context, run: RunRecord) -> None:
    """Plan, claim and launch the next attempt of a PENDING run now, as the controller's
    next tick would, following what comes of it (a launch that can never succeed ends the
    run FAILED at once). The front door's fast path to the first line of user code; the
    compare-and-set of the claim means it and a controller never both launch the attempt."""
    carry_out(ctx, run, launching.next_attempt(ctx, run))


def carry_out(ctx: Context, run: RunRecord, step: transitions.Step | None) -> None:
    """Apply ``step`` (decided on ``run``), then, while a transition asks to be followed,
    the handler of the state it reached (at most :data:`MAX_STEPS` moves)."""
    for _ in range(MAX_STEPS):
        moved = transitions.apply(ctx, run, step)
        if moved is None or not isinstance(step, Transition) or not step.follow:
            return
        run = moved
        handler = HANDLERS.get(RunState(run.state))
        if handler is None:
            return
        step = handler(ctx, run, Observation(ctx, run))


class Controller:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self._errors: dict[str, str] = {}
        self._next_sweep = time.monotonic() + ctx.settings.sweep_interval_s
        #: other work that keeps the controller from exiting when idle (webhook deliveries)
        self.busy: Callable[[], bool] = lambda: False

    def reconcile(self, run: RunRecord) -> None:
        reconcile(self.ctx, run)

    def tick(self) -> int:
        """One pass over the active runs; returns how many there were."""
        # oldest first: runs waiting for the same GPUs get them in the order they were submitted
        runs = sorted(
            self.ctx.store.list_runs(active_only=True, with_spec=True),
            key=lambda r: (r.created_at, r.id),
        )
        for run in runs:
            try:
                self.reconcile(run)
                self._errors.pop(run.id, None)
            except Exception as e:  # one run's trouble never kills the loop
                text = e.message if isinstance(e, CorralError) else f"{type(e).__name__}: {e}"
                if self._errors.get(run.id) != text:  # one traceback and event per distinct error
                    log.error(
                        "run %s: reconcile failed: %s\n%s", run.id, text, traceback.format_exc()
                    )
                    self._errors[run.id] = text
                    try:
                        self.ctx.store.add_event(run.id, "controller.error", text)
                    except Exception:
                        pass
        self._maybe_sweep()
        return len(runs)

    def _maybe_sweep(self) -> None:
        """The leak sweep, every ``sweep_interval_s``: each provider terminates the machines it
        holds for corral whose launch key no open resource row knows (belt and braces on top of
        the intent log) and frees what outlives machines (volumes) of runs that are over. One provider's failure is logged, never fatal."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.ctx.settings.sweep_interval_s
        try:
            active = {r.key for r in self.ctx.store.resources(open_only=True)}
            runs = {r.id for r in self.ctx.store.list_runs(active_only=True)}
        except Exception as e:
            log.warning("leak sweep skipped: %s", e)
            return
        for name, provider in self.ctx.providers.items():
            try:
                swept = provider.sweep(active, runs)
            except Exception as e:
                log.warning("leak sweep of %s failed: %s", name, e)
                continue
            if swept:
                log.warning("leak sweep of %s terminated %s", name, ", ".join(swept))

    def serve(self, *, idle_exit_s: float | None = None) -> None:
        """Tick until stopped (SIGTERM/SIGINT) or, with ``idle_exit_s``, until no run has been
        active for that long. SIGUSR1 wakes the loop at once (the CLI sends it after a launch)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, lambda *_: self.wake.set())
            signal.signal(signal.SIGTERM, lambda *_: self.stop())
            signal.signal(signal.SIGINT, lambda *_: self.stop())
        idle_since: float | None = None
        while not self.stopping.is_set():
            try:
                active = self.tick()
            except Exception as e:  # the store itself failed: wait and retry
                log.error("controller tick failed: %s", e)
                active = 1
            now = time.monotonic()
            if active or self.busy():
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif idle_exit_s is not None and now - idle_since >= idle_exit_s:
                log.info("no active run for %.0fs: controller exits", idle_exit_s)
                return
            self.wake.wait(self.ctx.settings.tick_seconds)
            self.wake.clear()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
