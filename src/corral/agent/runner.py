"""Runs one attempt: the setup commands in order, then the stages as a DAG.

Lifecycle (all decisions are taken on the runner thread; children report through a queue):

1. ``attempt.started``; a stage whose GPU request can never be met on this node fails the
   attempt before anything runs.
2. Setup commands run one after another (``_setup`` log); a non-zero exit fails the attempt.
3. Every stage whose ``needs`` all succeeded (or were skipped) starts as soon as its GPUs are
   free; until then it is ``waiting``. Stages in ``skip_stages`` are ``skipped``.
4. The first stage to fail (or exit 75: preempted), or a stop request, starts the shutdown:
   every running child is asked to save (its ``save_command``/``save_signal``, if any), gets
   its ``stop_signal`` (SIGTERM), then SIGKILL after its grace (``stop_grace_seconds``, else
   ``grace_seconds``); nothing new starts; stages that never started end ``cancelled``.
5. When no child is left (and the trackers fed from the stages' logs have finished, 30 s at
   most): ``attempt.finished`` with the phase and, on failure, the stage and its exit code. A
   multi-GPU launcher's stage that was stopped ends with 75 whatever the launcher exited with
   (:func:`corral.wire.outcome.stage_exit_code`).
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.agent import container as images
from corral.agent import launchers
from corral.agent.events import EventLog
from corral.agent.gpus import GpuPool
from corral.agent.procs import Child
from corral.agent.progress import ProgressTailer
from corral.agent.usage import stage_usage
from corral.files import write_json_atomic
from corral.secrets.redact import job_secret_values
from corral.wire import WIRE_VERSION
from corral.wire import env as C
from corral.wire.container import IMAGE_AUTH_ENV
from corral.wire.gang import GangRole, NodeAttempt
from corral.wire.node import NodeHook, iso
from corral.wire.outcome import (
    SETUP_STAGE,
    StopCause,
    attempt_phase,
    stage_exit_code,
    stage_state,
)
from corral.wire.plan import AgentPlan, StagePlan
from corral.wire.progress_patterns import PRESET_ENV, PRESETS
from corral.wire.status import HOOK_SECTIONS, Phase, StageState

if TYPE_CHECKING:
    from corral.agent.code import CodeStage
    from corral.agent.log_progress import BackgroundTrackers, LogProgress

SETUP = SETUP_STAGE
#: How long the end of an attempt waits for the trackers fed from the stages' logs to finish
#: (flush, upload, close their runs) before it kills them.
TRACKERS_FINISH_SECONDS = 30.0
#: Exit code reported for a command that could not be started at all (like a shell's 127).
EXIT_NOT_STARTED = 127


@dataclass
class StageRun:
    plan: StagePlan
    state: StageState = StageState.PENDING
    gpus: list[str] = field(default_factory=list)
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    pid: int | None = None
    started_mono: float = 0.0


class Runner:
    def __init__(
        self,
        plan: AgentPlan,
        events: EventLog,
        tailer: ProgressTailer,
        devices: list[str],
        *,
        environ: dict[str, str] | None = None,
        now: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        hooks: list[NodeHook] | None = None,
        state_dir: str | None = None,
        logs_dir: str | None = None,
        checkpoint_dir: str | None = None,
        code: CodeStage | None = None,
        gang: GangRole | None = None,
    ):
        self.plan = plan
        #: this node's place in the job's gang (None: the job's only node); a stage on fewer
        #: nodes than this node's rank is ``skipped`` here
        self.gang = gang
        #: puts the plan's code in place before the setup (None: the workdir is there)
        self.code = code
        self.hooks = list(hooks or [])
        # where this node keeps the agent's state and the checkpoints: the plan's, unless the
        # node's launch said otherwise (``corral agent --state-dir/--checkpoint-dir``)
        self.state_dir = Path(state_dir or plan.state_dir)
        self.checkpoint_dir = checkpoint_dir or plan.checkpoint_dir
        #: the attempt's stage logs (``state_dir/logs`` unless the agent says otherwise: an
        #: attempt handed to a kept node has folders of its own, ``main.attempt_records``)
        self.logs_dir = Path(logs_dir) if logs_dir else self.state_dir / "logs"
        self._events = events
        self._tailer = tailer
        self._pool = GpuPool(devices)
        self._environ = dict(os.environ if environ is None else environ)
        self._now, self._clock, self._sleep = now, clock, sleep
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._children: dict[str, Child] = {}
        #: the trackers fed from the stages' logs (finished before the attempt ends)
        self._log_trackers: list[BackgroundTrackers] = []
        self._log_taps: dict[str, LogProgress] = {}  # stage -> what reads its progress pattern
        self._stages = {s.name: StageRun(s) for s in plan.stages}
        self._outcome: tuple[Phase, str | None, int | None, str] | None = None
        self._stop_requested = False
        #: a gang's node holds its stages on several nodes until the controller says every
        #: node is there (``POST /gang/start``: no rank waits in its rendezvous for a node
        #: that may never come); set from the start on a node of no gang
        self.gang_started = threading.Event()
        if gang is None or plan.nodes <= 1:
            self.gang_started.set()
        #: the gang's nodes in every attempt so far, as the controller said with ``POST
        #: /gang/start`` (the manifest's ``node_attempts``)
        self.gang_nodes: list[NodeAttempt] = []
        #: the checkpoint the stages resume from (a hook restored it before the stages)
        self.resume_from: str | None = None
        self._stop_cause: StopCause | None = None
        self.phase = Phase.SETUP if plan.setup else Phase.RUNNING
        self.started_at = now()
        self.finished_at: float | None = None
        self.setup_done = threading.Event()  # no more output will go to the _setup log
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runner", daemon=True)
        #: the image the commands run in (None: on this node as it is; str: why they cannot)
        self.container = images.for_plan(
            plan, str(self.state_dir), self.checkpoint_dir, self._environ
        )

    # --- public ----------------------------------------------------------------------------

    def start(self) -> None:
        self._write_children()
        self._thread.start()

    def request_stop(
        self, reason: str = "stop requested", cause: StopCause = StopCause.AGENT
    ) -> None:
        """Graceful stop of the whole attempt (``cause`` says who asked). Idempotent: the
        first request's reason and cause are kept."""
        with self._lock:
            if self._stop_requested:
                return
            self._stop_requested = True
            self._stop_cause = cause
        self._events.emit("stop.requested", data={"reason": reason, "cause": cause.value})
        self._queue.put(("stop", reason))

    def start_gang(self, nodes: list[NodeAttempt] | None = None) -> bool:
        """Every node of the gang is there: its stages on several nodes may start (``POST
        /gang/start``; ``nodes``: the gang's nodes in every attempt so far, kept for the
        manifest, the latest given). True the first time."""
        with self._lock:
            if nodes:
                self.gang_nodes = list(nodes)
            if self.gang_started.is_set():
                return False
            self.gang_started.set()
        self._events.emit("gang.started", data={"rank": self.gang.rank if self.gang else 0})
        self._queue.put(("gang", None))  # wakes the runner
        return True

    def set_resume(self, path: str) -> None:
        """The stages start from the checkpoint restored at ``path`` (see NodeRunner)."""
        with self._lock:
            self.resume_from = path

    def command_for(self, stage: StagePlan) -> str:
        """The stage's command: ``run``, with ``resume_args`` after it when resuming (on its
        last line: a multi-line ``run`` loses its trailing newline first)."""
        if self.resume_from is not None and stage.resume_args:
            return f"{stage.run.rstrip()} {stage.resume_args}"
        return stage.run

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    def stage_running(self, name: str) -> bool:
        with self._lock:
            stage = self._stages.get(name)
            return stage is not None and stage.state == StageState.RUNNING

    def _only_services_left(self) -> bool:
        """Every stage but the services is done, and a service runs: a stop now is the normal
        end of a serving run (called with the lock held)."""
        serving = False
        for stage in self._stages.values():
            if stage.plan.service is not None:
                serving = serving or stage.state == StageState.RUNNING
            elif not stage.state.done:
                return False
        return serving

    def live_stages(self) -> list[str]:
        with self._lock:
            return [n for n, s in self._stages.items() if s.state == StageState.RUNNING]

    def status(self) -> dict[str, Any]:
        with self._lock:
            _, failed_stage, exit_code, reason = self._outcome or (None, None, None, "")
            stages: list[dict[str, Any]] = [
                {
                    "name": name,
                    "state": s.state.value,
                    "gpus": list(s.gpus),
                    "exit_code": s.exit_code,
                    "started_at": iso(s.started_at) if s.started_at else None,
                    "finished_at": iso(s.finished_at) if s.finished_at else None,
                    "pid": s.pid,
                }
                for name, s in self._stages.items()
            ]
            stopped = self._outcome is not None and self._outcome[0] == Phase.STOPPED
            out = {
                "wire_version": WIRE_VERSION,
                "run_id": self.plan.run_id,
                "attempt": self.plan.attempt,
                "phase": self.phase.value,
                "started_at": iso(self.started_at),
                "finished_at": iso(self.finished_at) if self.finished_at else None,
                "failed_stage": failed_stage,
                "exit_code": exit_code,
                "reason": reason,
                "stop_cause": self._stop_cause.value if stopped and self._stop_cause else None,
            }
        running = {
            str(st["name"]): int(st["pid"])
            for st in stages
            if st["state"] == StageState.RUNNING.value and st["pid"]
        }
        used = stage_usage(running)
        for stage in stages:
            if stage["name"] in used:
                stage["cpu_s"], stage["rss_mb"] = used[str(stage["name"])]
            stage["progress"] = self._tailer.latest(str(stage["name"]))
            unread = self._progress_unread(str(stage["name"]))
            if unread is not None:
                stage["progress_unread"] = unread
        extra: dict[str, Any] = {}
        for hook in self.hooks:
            try:
                sections = hook.status()
            except Exception:  # a status call never fails because of a hook
                continue
            # only the sections the wire model has: a stray key would fail the whole answer
            extra.update((k, v) for k, v in sections.items() if k in HOOK_SECTIONS)
        if self.code is not None:
            extra["code"] = self.code.status()
        return {**extra, **out, "stages": stages}

    def stage_finished(self, name: str) -> bool:
        """No more output will go to this stage's (or ``_setup``'s) log."""
        if name == SETUP:
            return self.setup_done.is_set()
        with self._lock:
            return self._stages[name].state.terminal

    # --- the attempt -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._events.emit(
                "attempt.started",
                data={"run_id": self.plan.run_id, "attempt": self.plan.attempt},
            )
            for stage in self.plan.stages:
                problem = self._pool.problem(stage.name, stage.gpus)
                if problem and stage.name not in self.plan.skip_stages:
                    self._shutdown(Phase.FAILED, stage.name, None, problem)
                    break
            if self._outcome is None and self.container is not None:
                self._prepare_image()
            if self._outcome is None and self.code is not None:
                self._prepare_code()
            if self._outcome is None and self.plan.setup:
                self._run_setup()
            self.setup_done.set()
            if self._outcome is None:
                self._call_hooks("before_stages")
            if self._outcome is None:
                self._set_phase(Phase.RUNNING)
                self._run_stages()
        except Exception as exc:  # a bug in the agent must still end the attempt clearly
            self._shutdown(Phase.FAILED, None, None, f"agent error: {type(exc).__name__}: {exc}")
            while self._children:
                self._handle(self._queue.get())
        finally:
            self.setup_done.set()
            self._finish()

    def _prepare_image(self) -> None:
        """The plan's image is there to run in (pulled, after a registry login), or the
        attempt fails with why (no engine on this node, the pull refused) and exit 78: the node
        cannot run this job, which the controller does not relaunch."""
        box = self.container
        problem = box if isinstance(box, str) else None
        if isinstance(box, images.Container):
            problem = box.pull(self._environ)
        if problem:
            self._shutdown(Phase.FAILED, None, C.EXIT_CANNOT_BOOT, problem)

    def _prepare_code(self) -> None:
        assert self.code is not None
        problem = self.code.prepare(lambda: self._stop_requested)
        self._drain_queue()  # a stop requested while the code was awaited
        if problem and self._outcome is None:
            self._shutdown(Phase.FAILED, None, None, f"code: {problem}")

    def _run_setup(self) -> None:
        self._events.emit("setup.started", data={"commands": len(self.plan.setup)})
        began = self._clock()
        code: int | None = 0
        for number, command in enumerate(self.plan.setup, start=1):
            self._drain_queue()  # a stop requested between two commands
            if self._outcome is not None:
                code = None
                break
            child = self._spawn(SETUP, command, self._env(None, list(self._pool.devices)))
            if isinstance(child, str):
                code, reason = EXIT_NOT_STARTED, f"setup command {number} could not start: {child}"
            else:
                while self._children:
                    self._handle(self._queue.get())
                code = child.exit_code if not child.stopped else None
                reason = f"setup command {number} exited with code {code}"
            if code != 0:
                if self._outcome is None:
                    self._shutdown(Phase.FAILED, SETUP, code, reason)
                break
        duration = round(self._clock() - began, 3)
        self._events.emit("setup.finished", data={"exit_code": code, "duration_s": duration})

    def _run_stages(self) -> None:
        for name in self.plan.skip_stages:
            with self._lock:
                self._stages[name].state = StageState.SKIPPED
            self._events.emit("stage.skipped", stage=name)
        rank = self.gang.rank if self.gang is not None else 0
        for name, stage in self._stages.items():  # the head's only (or a few nodes') stages
            if stage.plan.nodes <= rank and stage.state != StageState.SKIPPED:
                with self._lock:
                    stage.state = StageState.SKIPPED
                self._events.emit(
                    "stage.skipped", stage=name, data={"nodes": stage.plan.nodes, "rank": rank}
                )
        while True:
            self._drain_queue()
            if self._outcome is None and not self._stop_requested:
                self._start_ready()
            if not self._children:
                if not self._held_for_gang():
                    break
                try:  # nothing runs: wait for the gang's start (or a stop)
                    self._handle(self._queue.get(timeout=0.5))
                except queue.Empty:
                    pass
                continue
            self._handle(self._queue.get())
        with self._lock:
            stuck = [
                n
                for n, s in self._stages.items()
                if s.state in (StageState.PENDING, StageState.WAITING)
            ]
        if stuck and self._outcome is None and not self._stop_requested:
            self._shutdown(Phase.FAILED, stuck[0], None, f"stage {stuck[0]!r} could not start")
        self._drain_queue()

    def _held_for_gang(self) -> bool:
        """A stage on several nodes waits for the gang's start (and nothing ended the
        attempt)."""
        if self.gang_started.is_set() or self._outcome is not None or self._stop_requested:
            return False
        with self._lock:
            return any(
                s.plan.nodes > 1 and s.state in (StageState.PENDING, StageState.WAITING)
                for s in self._stages.values()
            )

    def _start_ready(self) -> None:
        for name, stage in self._stages.items():
            if stage.state not in (StageState.PENDING, StageState.WAITING):
                continue
            needs = [self._stages[d].state for d in stage.plan.needs]
            if not all(state.done for state in needs):
                continue
            if stage.plan.nodes > 1 and not self.gang_started.is_set():
                if stage.state != StageState.WAITING:
                    with self._lock:
                        stage.state = StageState.WAITING
                    self._events.emit("stage.waiting", stage=name, data={"gang": True})
                continue
            logical = self._pool.try_acquire(name, stage.plan.gpus)
            if logical is None:
                if stage.state != StageState.WAITING:
                    with self._lock:
                        stage.state = StageState.WAITING
                    self._events.emit("stage.waiting", stage=name, data={"gpus": stage.plan.gpus})
                continue
            gpus = self._pool.physical(logical)
            with self._lock:
                stage.gpus, stage.started_at, stage.started_mono = gpus, self._now(), self._clock()
            given = {**self.plan.env, **stage.plan.env}
            meet, port = self._rendezvous(name, stage.plan)
            command, extra = launchers.prepare(
                self.command_for(stage.plan), len(gpus), given, meet, port
            )
            child = self._spawn(name, command, {**self._env(stage.plan, gpus), **extra}, stage.plan)
            if isinstance(child, str):
                self._pool.release(name)
                self._finish_stage(name, StageState.FAILED, EXIT_NOT_STARTED)
                reason = f"stage {name!r} could not start: {child}"
                self._shutdown(Phase.FAILED, name, EXIT_NOT_STARTED, reason)
                return
            with self._lock:
                stage.state, stage.pid = StageState.RUNNING, child.pid
            self._events.emit("stage.started", stage=name, data={"gpus": gpus, "pid": child.pid})

    def _rendezvous(
        self, name: str, stage: StagePlan
    ) -> tuple[launchers.Rendezvous, Callable[[], int]]:
        """Where the stage's ranks meet, and its port: a stage on several nodes meets at the
        head's address on the gang's port of the stage (every node agrees on it); any other
        on this node's loopback and a free port of it."""
        if self.gang is None or stage.nodes <= 1:
            return launchers.Rendezvous(nodes=stage.nodes), launchers.free_port
        index = list(self._stages).index(name)
        port = self.gang.stage_port(index)
        meet = launchers.Rendezvous(
            nodes=stage.nodes, rank=self.gang.rank, master_addr=self.gang.master_addr
        )
        return meet, lambda: port

    # --- children --------------------------------------------------------------------------

    def _spawn(
        self, name: str, command: str, env: dict[str, str], stage: StagePlan | None = None
    ) -> Child | str:
        """Start a child (a setup command, or ``stage`` with its stop settings), or return why
        it could not start (also written to its log)."""
        settings = _stop_settings(stage) if stage else {}
        box, cleanup = self.container, None
        if isinstance(box, images.Container):  # in the plan's image, through the engine
            names = images.job_names(env, self._environ, images.chosen_names(self.plan, stage, env))
            gpus = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
            cname = box.name_for(name)
            save = settings.get("save_command")
            command, env = box.wrap(cname, command, env, names, gpus, save)
            if save:
                settings["save_command"] = box.exec_command(cname, names)
            cleanup = box.remove_argv(cname)
        try:
            child = Child(
                name,
                command,
                cwd=self.plan.workdir,
                env=env,
                log_path=self.logs_dir / f"{name}.log",
                grace=stage.grace(self.plan.grace_seconds) if stage else self.plan.grace_seconds,
                on_exit=lambda c: self._queue.put(("exit", c)),
                now=self._now,
                clock=self._clock,
                sleep=self._sleep,
                mask=self.secret_values(),
                tap=self._log_progress(name, env),
                disk=self._events.disk,
                cleanup=cleanup,
                **settings,
            )
        except OSError as exc:
            error = exc.strerror or type(exc).__name__
            self._events.disk.note(exc, f"starting {name}")
            try:
                with open(self.logs_dir / f"{name}.log", "a", encoding="utf-8") as log:
                    log.write(f"{iso(self._now())} corral: could not start: {error}\n")
            except OSError:
                pass  # a full disk: the reason still reaches the attempt
            return error
        self._children[name] = child
        self._write_children()
        return child

    def _log_progress(self, name: str, env: dict[str, str]) -> LogProgress | None:
        """The tap that reads the stage's progress from its log (its ``progress`` pattern)."""
        stage = self._stages.get(name)
        pattern = stage.plan.progress if stage is not None else None
        if not pattern:
            return None
        # here, not at the top: the agent's start-up pays for the log parser only when a
        # stage has a pattern (benchmarks/launch_overhead.py)
        from corral.agent.log_progress import LogProgress, stage_trackers

        trackers = stage_trackers(env, self.plan.workdir)  # started by the first values
        try:
            tap = LogProgress(
                pattern,
                str(self._tailer.path_for(name)),
                mask=self.secret_values(),
                trackers=trackers,
                clock=self._clock,
            )
        except ValueError as exc:  # a plan the spec did not check: the stage runs without it
            with open(self.logs_dir / f"{name}.log", "a", encoding="utf-8") as log:
                log.write(f"{iso(self._now())} corral: progress pattern not used: {exc}\n")
            return None
        if trackers is not None:
            self._log_trackers.append(trackers)
        self._log_taps[name] = tap
        return tap

    def _progress_unread(self, name: str) -> dict[str, Any] | None:
        """For a stage whose ``progress`` pattern has read nothing in its log so far: the
        pattern (a preset's name, or ``regex``) and how many lines it was given."""
        tap = self._log_taps.get(name)
        stage = self._stages.get(name)
        if tap is None or tap.readings or stage is None:
            return None
        pattern = stage.plan.progress or ""
        return {"pattern": pattern if pattern in PRESETS else "regex", "lines": tap.lines}

    def _handle(self, message: tuple[str, Any]) -> None:
        kind, value = message
        if kind == "gang":  # the gang's start: _start_ready starts the held stages
            return
        if kind == "stop":
            if self._outcome is None:
                with self._lock:
                    served = self._only_services_left()
                if served:  # training is done: stopping the services ends the run well
                    self._shutdown(Phase.SUCCEEDED, None, None, f"services stopped: {value}")
                else:
                    self._shutdown(Phase.STOPPED, None, None, value)
            return
        child: Child = value
        self._children.pop(child.name, None)
        self._write_children()
        if child.name == SETUP:
            return
        self._pool.release(child.name)
        self._tailer.poll([child.name])  # what the stage wrote last comes before its end
        self._tailer.flush(child.name)  # and no metric it reported stays unsent
        code = stage_exit_code(child.exit_code, stopped=child.stopped, launcher=child.launcher)
        state = stage_state(code, stopped=child.stopped)
        own = {"launcher_exit_code": child.exit_code} if code != child.exit_code else {}
        self._finish_stage(child.name, state, code, **own)
        ends = attempt_phase(state)
        if ends == Phase.FAILED:
            reason = f"stage {child.name!r} exited with code {code}"
            self._shutdown(ends, child.name, code, reason)
        elif ends == Phase.PREEMPTED:
            self._shutdown(ends, child.name, code, f"stage {child.name!r} was preempted")

    def _finish_stage(
        self, name: str, state: StageState, code: int | None, **extra: int | None
    ) -> None:
        stage = self._stages[name]
        with self._lock:
            stage.state, stage.exit_code, stage.finished_at = state, code, self._now()
        duration = round(self._clock() - stage.started_mono, 3) if stage.started_at else 0.0
        data = {"state": state.value, "exit_code": code, "duration_s": duration, **extra}
        self._events.emit("stage.finished", stage=name, data=data)

    def _shutdown(self, phase: Phase, stage: str | None, code: int | None, reason: str) -> None:
        """Record why the attempt ends (the first reason wins) and stop every child."""
        with self._lock:
            if self._outcome is None:
                self._outcome = (phase, stage, code, reason)
            self.phase = Phase.STOPPING
        if self._children:
            self._tell_hooks_stopping()
        for child in list(self._children.values()):
            child.terminate()

    def _tell_hooks_stopping(self) -> None:
        """The hooks with a ``stopping()`` method learn, before any stop signal goes out,
        that the stages are about to be stopped (the checkpoint mirror looks once more)."""
        for hook in self.hooks:
            stopping = getattr(hook, "stopping", None)
            if callable(stopping):
                try:
                    stopping()
                except Exception as exc:  # the stop goes on whatever a hook does
                    message = f"{hook.name}: {type(exc).__name__}: {exc}"
                    self._events.emit("agent.error", data={"hook": hook.name, "message": message})

    def _finish_log_trackers(self) -> None:
        """The trackers fed from the stages' logs end their runs before the attempt does (the
        machine may go right after), within ``TRACKERS_FINISH_SECONDS`` in all."""
        deadline = self._clock() + TRACKERS_FINISH_SECONDS
        for trackers in self._log_trackers:
            trackers.finish()
        for trackers in self._log_trackers:
            trackers.wait(max(0.0, deadline - self._clock()))

    def _drain_queue(self) -> None:
        while True:
            try:
                self._handle(self._queue.get_nowait())
            except queue.Empty:
                return

    def _finish(self) -> None:
        """End the attempt: every step here is best effort (a full disk, a failing hook or
        tracker), so ``attempt.finished`` is always emitted and the phase always terminal:
        an attempt that never says it ended keeps its machine, and its bill, forever."""
        for name, stage in self._stages.items():
            if stage.state in (StageState.PENDING, StageState.WAITING):
                self._best_effort(
                    "cancelling stages", self._finish_stage, name, StageState.CANCELLED, None
                )
        phase, failed_stage, code, reason = self._outcome or (Phase.SUCCEEDED, None, None, "")
        if self.hooks:
            self._set_phase(Phase.FINISHING)  # not terminal: the controller keeps the machine
            problem = self._best_effort("hooks", self._call_hooks, "after_stages", phase.value)
            if problem and phase == Phase.SUCCEEDED:
                phase, reason = Phase.FAILED, problem
        self._best_effort("trackers", self._finish_log_trackers)
        if phase == Phase.FAILED:
            full = self._events.disk.check_after_failure(self.plan.workdir)
            if full and full not in reason:
                reason = f"{reason}: {full}" if reason else full
        with self._lock:
            self._outcome = (phase, failed_stage, code, reason)
        self._write_children()
        data = {
            "phase": phase.value,
            "failed_stage": failed_stage,
            "exit_code": code,
            "reason": reason,
        }
        if phase == Phase.STOPPED and self._stop_cause is not None:
            data["stop_cause"] = self._stop_cause.value
        # the event first, then the terminal phase: whoever sees the attempt ended in
        # GET /status finds its attempt.finished event in GET /events too; and the bell
        # last: a controller that looks the moment it rings finds the attempt ended (rung
        # before, it saw the event but a live status, took the ring for nothing and waited
        # its quiet pace, 30 s by default, for the end)
        last = self._best_effort(
            "the last event", self._events.emit, "attempt.finished", data=data, announce=False
        )
        with self._lock:
            self.phase, self.finished_at = phase, self._now()
        self.finished.set()
        if last is not None:
            self._best_effort("the last ring", self._events.announce, last)

    def _best_effort(self, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``fn(*args, **kw)``, its failure written to the agent's stderr instead of raised."""
        try:
            return fn(*args, **kw)
        except Exception as exc:
            self._events.disk.note(exc, what)
            print(f"corral agent: {what}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None

    def command_env(self) -> dict[str, str]:
        """The environment of a command run on the node besides the stages (``corral
        exec``): what a setup command gets (the job's env and secrets, every GPU)."""
        return self._env(None, list(self._pool.devices))

    def secret_values(self) -> list[bytes]:
        """The job's secret values (named in CORRAL_SECRET_NAMES), masked in stage logs and in
        every answer of the HTTP API."""
        return [v.encode() for v in job_secret_values(self._environ)]

    def _call_hooks(self, point: str, *args: Any) -> str | None:
        """Call every hook at ``point``; the first failure reason (or exception) is returned
        and, before the stages, fails the attempt."""
        first = None
        for hook in self.hooks:
            try:
                problem = getattr(hook, point)(self, *args)
            except Exception as exc:
                problem = f"{hook.name}: {type(exc).__name__}: {exc}"
                self._events.emit("agent.error", data={"hook": hook.name, "message": problem})
            if problem and first is None:
                first = problem
                if point == "before_stages":
                    self._shutdown(Phase.FAILED, None, None, problem)
                    break
        return first

    def _set_phase(self, phase: Phase) -> None:
        with self._lock:
            self.phase = phase

    def _write_children(self) -> None:
        """The stage groups on disk (the provider's stop finds them even if the agent died);
        a full disk leaves the last copy in place (the reserve makes room at the end)."""
        records = [c.record() for c in self._children.values()]
        try:
            write_json_atomic(self.state_dir / "children.json", records, mode=0o644)
        except OSError as exc:
            self._events.disk.note(exc, "children.json")

    # --- environment -----------------------------------------------------------------------

    def _env(self, stage: StagePlan | None, gpus: list[str]) -> dict[str, str]:
        """os.environ + plan.env + stage.env, then the agent's own variables on top (a stage
        cannot override its GPUs or the CORRAL_* contract, the checkpoint policy's included:
        the SDK keeps what the agent's mirrors keep); never the agent's token."""
        plan = self.plan
        env = {**self._environ, **plan.env, **(stage.env if stage else {})}
        env.update(plan.checkpoint_policy.env())
        env.update(
            {
                "CUDA_VISIBLE_DEVICES": ",".join(gpus),
                "PYTHONUNBUFFERED": "1",
                C.ENV_RUN_ID: plan.run_id,
                C.ENV_ATTEMPT: str(plan.attempt),
                C.ENV_STAGE: stage.name if stage else SETUP,
                C.ENV_CHECKPOINT_DIR: self.checkpoint_dir,
                C.ENV_NUM_GPUS: str(len(gpus)),
                C.ENV_GRACE_SECONDS: str(
                    stage.grace(plan.grace_seconds) if stage else plan.grace_seconds
                ),
                C.ENV_HOURLY_PRICE: str(plan.hourly_price),
                C.ENV_COST_OFFSET: str(plan.cost_offset_usd),
            }
        )
        if plan.budget_usd is not None:
            env[C.ENV_BUDGET_USD] = str(plan.budget_usd)
        else:
            env.pop(C.ENV_BUDGET_USD, None)
        env.pop(C.ENV_SERVICE_PREFIX, None)
        if stage is not None and stage.service is not None:
            env[C.ENV_SERVICE_PREFIX] = "" if stage.service.root else f"/services/{stage.name}"
        if stage is not None:
            env[C.ENV_PROGRESS_FILE] = str(self._tailer.path_for(stage.name))
            chosen = {**plan.env, **stage.env}  # what the spec sets is left as it is
            for key, value in PRESET_ENV.get(stage.progress or "", {}).items():
                if key not in chosen:
                    env[key] = value
        else:
            env.pop(C.ENV_PROGRESS_FILE, None)
        if self.resume_from is not None:
            env[C.ENV_RESUME], env[C.ENV_RESUME_FROM] = "1", self.resume_from
        else:
            env.pop(C.ENV_RESUME, None)
            env.pop(C.ENV_RESUME_FROM, None)
        env.pop(C.ENV_AGENT_TOKEN, None)
        for key in IMAGE_AUTH_ENV:  # the agent's own, for the registry: never the job's
            env.pop(key, None)
        env["PATH"] = _with_interpreter_first(env.get("PATH", ""))
        return env


def _stop_settings(stage: StagePlan) -> dict[str, Any]:
    """How :class:`Child` stops this stage (see ``procs``)."""
    save = stage.save_signal
    return {
        "stop_signal": signal.Signals[stage.stop_signal],
        "save_signal": signal.Signals[save] if save else None,
        "save_command": stage.save_command,
        "launcher": launchers.uses_launcher(stage.run),
    }


def _with_interpreter_first(path: str) -> str:
    """Put the directory of the Python running corral first on PATH, so a stage's bare
    ``python`` is the interpreter corral (and its venv's packages) runs under, even when the venv
    is not activated or the system has no ``python`` command. Not when corral runs on its own
    runtime (``providers/common/runtime.py``, beside the image's environment): a stage's
    ``python`` is then the image's, and PATH is left as the image has it."""
    if os.path.isfile(os.path.join(os.path.dirname(sys.prefix), "RUNTIME.json")):
        return path
    bindir = os.path.dirname(sys.executable)
    parts = [p for p in path.split(os.pathsep) if p]
    if parts and parts[0] == bindir:
        return path
    return os.pathsep.join([bindir, *[p for p in parts if p != bindir]])
