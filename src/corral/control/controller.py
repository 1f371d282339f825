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
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial

from corral.control import actions, finishing, launching, monitor, scheduling, transitions
from corral.control.bell import Bell, bell_settings, publish
from corral.control.context import Context, log
from corral.control.gpu_history import GpuHistory
from corral.control.leases import Leases
from corral.control.loop_metrics import LoopMetrics
from corral.control.nudges import take_nudges
from corral.control.observe import Observation
from corral.control.schedule import Result, Schedule
from corral.control.sweeping import Sweeper
from corral.control.transitions import Transition
from corral.control.watchers import run_watchers
from corral.control.watching import FOLLOW_S, followed_runs
from corral.errors import CorralError, NotFound
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


def reconcile(ctx: Context, run: RunRecord, *, follow: bool = True) -> Result:
    """One step of one run: the user's request if there is one, else the watchers, else the
    handler of its state; the step decided is applied (``transitions.apply``), and a stop
    or a recovery it starts (``Transition.follow``) goes on at once unless ``follow`` is
    False (then the next look, on the workers of the new state, carries it on). Returns what
    the schedule needs to know of the look."""
    obs = Observation(ctx, run)
    if run.requested_action:
        step = actions.handle_request(ctx, run)
    else:
        step = run_watchers(ctx, run, obs)
        handler = HANDLERS.get(RunState(run.state))
        if step is None and handler is not None:
            step = handler(ctx, run, obs)
    moved = carry_out(ctx, run, step, follow=follow)
    state = RunState(moved.state if moved is not None else run.state)
    return Result(
        state=state.value,
        wake_in=obs.wake_in if moved is None else None,
        lively=obs.lively,
        gone=state.terminal,
        attempt=(moved or run).attempt,
    )


def start_attempt(ctx: Context, run: RunRecord) -> None:
    """Plan, claim and launch the next attempt of a PENDING run now, as the controller's
    next tick would, following what comes of it (a launch that can never succeed ends the
    run FAILED at once). The front door's fast path to the first line of user code; the
    compare-and-set of the claim means it and a controller never both launch the attempt."""
    carry_out(ctx, run, launching.next_attempt(ctx, run))


def carry_out(
    ctx: Context, run: RunRecord, step: transitions.Step | None, *, follow: bool = True
) -> RunRecord | None:
    """Apply ``step`` (decided on ``run``), then, while a transition asks to be followed
    (and ``follow``), the handler of the state it reached (at most :data:`MAX_STEPS` moves).
    Returns the run as the last move left it (None: it did not move)."""
    last = None
    for _ in range(MAX_STEPS):
        moved = transitions.apply(ctx, run, step)
        if moved is None:
            return last
        last = moved
        if not follow or not isinstance(step, Transition) or not step.follow:
            return last
        run = moved
        handler = HANDLERS.get(RunState(run.state))
        if handler is None:
            return last
        step = handler(ctx, run, Observation(ctx, run))
    return last


class Controller:
    """The loop over the active runs. :meth:`serve` is the controller process: each run is
    looked at on its own schedule (``control.schedule``) by a bounded pool of poll workers
    (PROVISIONING, RUNNING) or of operations workers (launches, teardowns, requests), so one
    slow agent or cloud call delays only its own run. :meth:`tick` looks at every active run
    once, one after another, in this thread (tests, and embedders that drive the loop).

    ``holds``: which runs this controller looks at (by run id; default all), for controllers
    that share a store and hold a lease each on some of its runs; ``leases`` gives it (and is
    refreshed before each read of the active runs). Before each read, the runs of the cron
    schedules that are due are started (``control.scheduling``)."""

    def __init__(
        self,
        ctx: Context,
        *,
        holds: Callable[[str], bool] | None = None,
        leases: Leases | None = None,
    ):
        self.ctx = ctx
        self.leases = leases
        # a listing that shows a belled run's machine changed makes the run due at once
        ctx.census.on_change = self._rung
        if holds is None and leases is not None:
            holds = leases.holds
        #: active runs another controller holds (a standby controller stays up for them)
        self._elsewhere = 0
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self._errors: dict[str, str] = {}
        self._next_sweep = time.monotonic() + ctx.settings.sweep_interval_s
        #: other work that keeps the controller from exiting when idle (webhook deliveries)
        self.busy: Callable[[], bool] = lambda: False
        self.holds = holds
        self.schedule = Schedule(
            ctx.settings,
            holds=holds,
            belled=lambda rid, n: ctx.bell is not None and ctx.bell.belled(rid, n),
        )
        #: set by SIGUSR1 (a CLI launched or asked something): read the active runs now
        self._poked = False
        self._lock = threading.Lock()
        self._in_flight = 0
        #: looks of the poll workers handed out and not ended
        self._polls = 0
        #: the poll and operations workers while :meth:`serve` runs (a look that ends hands
        #: out the looks left waiting for room itself, without waiting for the loop)
        self._pools: tuple[Executor, Executor] | None = None
        self._sweeping = False
        #: monotonic time the loop sleeps until (a worker wakes it for an earlier due look)
        self._sleep_until = 0.0
        self._metrics: LoopMetrics | None = None
        #: the active sweeps' trials, started and watched before each read of the runs
        self.sweeper = Sweeper(ctx)
        #: every GPU's readings into the store, at most once per interval, before each read
        #: (inline in :meth:`tick`; on a thread of its own while :meth:`serve` runs)
        self.gpu_history = GpuHistory(ctx)
        self._serving = False

    def reconcile(self, run: RunRecord) -> None:
        reconcile(self.ctx, run)

    def tick(self) -> int:
        """One pass over the active runs this controller holds, highest priority first, then
        oldest, in this thread; returns how many active runs there were."""
        self._before_read()
        # runs waiting for the same GPUs get them by priority, then in submission order (the
        # order of Store.run_heads); no spec is read here
        place = {run_id: i for i, (run_id, _, _) in enumerate(self.ctx.store.run_heads())}
        runs = sorted(
            self.ctx.store.list_runs(active_only=True),
            key=lambda r: (place.get(r.id, len(place)), r.created_at, r.id),
        )
        mine = [r for r in runs if self.holds is None or self.holds(r.id)]
        self._elsewhere = len(runs) - len(mine)
        for run in mine:
            self._guarded(run.id, partial(reconcile, self.ctx, run))
        self._maybe_sweep()
        return len(runs)

    def _guarded(self, run_id: str, look: Callable[[], Result]) -> Result | None:
        """``look()``, with one run's trouble logged and recorded (one traceback and event
        per distinct error), never raised: it never stops the loop."""
        try:
            result = look()
            self._errors.pop(run_id, None)
            return result
        except Exception as e:
            text = e.message if isinstance(e, CorralError) else f"{type(e).__name__}: {e}"
            if self._errors.get(run_id) != text:
                log.error("run %s: reconcile failed: %s\n%s", run_id, text, traceback.format_exc())
                self._errors[run_id] = text
                try:
                    self.ctx.store.add_event(run_id, "controller.error", text)
                except Exception:
                    pass
            return None

    def _maybe_sweep(self, pool: Executor | None = None) -> None:
        """The leak sweep, every ``sweep_interval_s``: each provider terminates the machines it
        holds for corral whose launch key no open resource row knows (belt and braces on top of
        the intent log) and frees what outlives machines (volumes) of runs that are over. One
        provider's failure is logged, never fatal. With ``pool`` it runs there (one at a time)."""
        now = time.monotonic()
        if now < self._next_sweep or self._sweeping:
            return
        self._next_sweep = now + self.ctx.settings.sweep_interval_s
        if pool is None:
            self._sweep()
            return
        self._sweeping = True

        def sweep() -> None:
            try:
                self._sweep()
            finally:
                self._sweeping = False

        pool.submit(sweep)

    def _sweep(self) -> None:
        try:
            rows = self.ctx.store.resources(open_only=True)
            # a gang's node kept through a repair is a row of the new attempt whose machine
            # was launched under the old attempt's key: both keys are in use
            active = {r.key for r in rows} | {
                str(r.instance["key"]) for r in rows if r.instance and r.instance.get("key")
            }
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

    # --- the scheduled loop -------------------------------------------------------------

    def serve(self, *, idle_exit_s: float | None = None) -> None:
        """Look at each active run on its schedule until stopped (SIGTERM/SIGINT) or, with
        ``idle_exit_s``, until no run has been active for that long. SIGUSR1 (the CLI sends
        it after a launch or a request) makes the loop read the active runs at once."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, lambda *_: self.poke())
            signal.signal(signal.SIGTERM, lambda *_: self.stop())
            signal.signal(signal.SIGINT, lambda *_: self.stop())
        settings = self.ctx.settings
        polls = ThreadPoolExecutor(max(1, settings.poll_workers), "corral-poll")
        ops = ThreadPoolExecutor(max(1, settings.ops_workers), "corral-op")
        self._serving = True
        self._pools = (polls, ops)
        idle_since: float | None = None
        next_read = 0.0
        #: how long each look at a run takes, for `corral server`'s /metrics
        self._metrics = LoopMetrics(self.ctx.home)
        self._start_bell()
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                if self._poked or now >= next_read:
                    self._poked = False
                    next_read = now + settings.tick_seconds
                    self._read_runs()
                    self._listen()
                self._dispatch(polls, ops)
                self._maybe_sweep(ops)
                waiting = self._in_flight or self._elsewhere or self.sweeper.active
                if len(self.schedule) or waiting or self.busy():
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif idle_exit_s is not None and now - idle_since >= idle_exit_s:
                    log.info("no active run for %.0fs: controller exits", idle_exit_s)
                    return
                due = self.schedule.next_due()
                until = next_read if due is None else min(next_read, due)
                self._sleep_until = until
                self.wake.wait(max(0.0, until - time.monotonic()))
                self.wake.clear()
        finally:
            self.stopping.set()
            self._pools = None
            polls.shutdown(wait=True, cancel_futures=True)
            ops.shutdown(wait=True, cancel_futures=True)
            self._serving = False
            self._metrics.flush()
            if self.ctx.bell is not None:
                self.ctx.bell.close()
                self.ctx.bell = None

    def _start_bell(self) -> None:
        """Listen for the agents' rings (``control.bell``) unless ``CORRAL_BELL=off``; a bell
        that cannot listen is logged and the runs are pulled as without one."""
        if self.ctx.bell is not None:
            return
        try:
            bind, advertise = bell_settings()
            if bind is None:
                return
            self.ctx.bell = Bell(self.ctx.home, self._rung, bind=bind, advertise=advertise).start()
            publish(self.ctx.home, self.ctx.bell.header())  # for `corral launch`'s agents
        except (OSError, CorralError) as e:
            log.warning("no bell (every run is pulled at its usual pace): %s", e)

    def _rung(self, run_ids: list[str]) -> None:
        """Agents rang (the bell's thread), or a listing showed their machines changed
        (``control.census``): their runs are due now."""
        self.schedule.ring(run_ids)
        self.wake.set()

    def _listen(self) -> None:
        """Each read of the runs: a bell fallen silent makes its run due now (its machine
        may be gone), and the runs someone follows (``control.watching``) keep the usual
        pace."""
        bell = self.ctx.bell
        if bell is not None:
            silent = bell.silent()
            if silent:
                self.schedule.ring(silent)
        followed = followed_runs(self.ctx.home)
        if followed:
            self.schedule.watch(followed, time.monotonic() + FOLLOW_S)

    def _read_runs(self) -> None:
        """The active runs from the store, into the schedule; runs that ended elsewhere (or
        are no longer held) are forgotten."""
        self._before_read(leases=False)
        # sharing the store: only the runs it holds and the free ones (its share, not all)
        owner = self.leases.owner if self.leases is not None else None
        try:
            # highest priority first, then oldest: the line for capacity goes in this order
            heads = self.ctx.store.run_heads(owner)  # (id, state, requested action): Head rows
            if self.leases is not None:  # the store is asked only when something may change
                held = self.leases.refresh([h[0] for h in heads])
                if held.difference(h[0] for h in heads):  # taken from a controller gone
                    heads = self.ctx.store.run_heads(owner)
        except Exception as e:  # the store itself failed: keep the schedule, retry
            log.error("controller tick failed: %s", e)
            return
        if self.leases is not None:
            self._elsewhere = self.leases.elsewhere
        elif self.holds is not None:
            self._elsewhere = sum(1 for h in heads if not self.holds(h[0]))
        for run_id in self.schedule.sync(heads):
            self._forget(run_id)
        self.schedule.hurry(take_nudges(self.ctx.home))  # runs a CLI asked to be looked at

    def _before_read(self, *, leases: bool = True) -> None:
        """Start the runs of the schedules that are due, record the GPUs' readings when an
        interval has passed, and (``leases``) take or renew this controller's leases, before
        the active runs are read."""
        try:
            scheduling.fire_due(self.ctx)
        except Exception as e:  # the store failed: the next read tries again
            log.error("schedules: %s", e)
        self.sweeper.advance()
        self.gpu_history.advance(background=self._serving)
        if leases and self.leases is not None:
            self.leases.refresh()

    def _dispatch(self, polls: Executor, ops: Executor) -> None:
        """Hand the due runs to their workers: every operation, and as many looks as the poll
        workers have room for (:data:`POLLS_PER_WORKER` each); the others wait in the
        schedule, in order, where a run that rings overtakes them (queued in the workers'
        queue, it would wait behind every look handed out before it)."""
        with self._lock:
            room = max(1, self.ctx.settings.poll_workers) * POLLS_PER_WORKER - self._polls
        for slot in self.schedule.take_due(polled_room=room):
            with self._lock:
                self._in_flight += 1
                self._polls += slot.polled
            pool = polls if slot.polled else ops
            pool.submit(self._look, slot.run_id, slot.state, slot.polled, slot.line_turn)

    def _look(self, run_id: str, state: str, polled: bool, queued: bool) -> None:
        """One look at one run, on a worker thread (a poll worker does not follow the run
        into a stop or a recovery: the operations workers carry those on)."""
        result: Result | None = None
        began = time.monotonic()
        try:
            result = self._guarded(run_id, lambda: self._look_at(run_id, polled))
        finally:
            with self._lock:
                self._in_flight -= 1
                self._polls -= polled
                if self._metrics is not None:
                    self._metrics.observe(time.monotonic() - began, len(self.schedule))
            due = self.schedule.done(run_id, result)
            if result is not None and result.gone:
                self._forget(run_id)
            freed = result is not None and (
                result.gone or (state in _TEARDOWN and result.state != state)
            )
            if freed:  # a machine may have been freed: the runs waiting for one try now
                self.schedule.wake_waiting()
            if self.schedule.deferred:  # looks wait for room, and this one made some
                self._refill()
            if freed or queued or due is None or due < self._sleep_until:
                self.wake.set()

    def _refill(self) -> None:
        """From a worker whose look ended: hand out what waits for room (the loop may be busy
        reading ten thousand runs; the workers would idle until it is back)."""
        pools = self._pools
        if pools is None or self.stopping.is_set():
            self.wake.set()
            return
        try:
            self._dispatch(*pools)
        except RuntimeError:  # the workers are shutting down: the loop is over
            pass

    def _look_at(self, run_id: str, polled: bool) -> Result:
        try:
            run = self.ctx.store.get_run(run_id, with_spec=False)
        except NotFound:  # deleted under us: over for this controller
            return Result("", gone=True)
        if not run.active:
            return Result(run.state, gone=True)
        return reconcile(self.ctx, run, follow=not polled)

    def _forget(self, run_id: str) -> None:
        self.ctx.forget(run_id)
        if self.ctx.bell is not None:
            self.ctx.bell.forget(run_id)

    def poke(self) -> None:
        """Read the active runs at once (what SIGUSR1 does)."""
        self._poked = True
        self.wake.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()


#: looks handed to each poll worker at most (one running, three queued behind it): the rest
#: wait in the schedule, where a run whose agent rang goes before them
POLLS_PER_WORKER = 4


#: states whose end may free a machine (a teardown was under way)
_TEARDOWN = frozenset({RunState.STOPPING.value, RunState.RECOVERING.value})
