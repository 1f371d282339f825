"""``corral agent``: run one attempt of a run on this node and serve its HTTP API.

``python -m corral.agent [LAUNCH OPTIONS] --plan PLAN.json`` (the token comes from
``CORRAL_AGENT_TOKEN``, never from the plan or the command line). :class:`Agent` is the same
thing in-process.

The plan was built once by the controller and is never rewritten. What only the node knows
when it starts the agent comes as launch options (:class:`NodeLaunch`), each overriding the
plan's value for this node: ``--devices`` (the GPUs the provider gave this instance),
``--state-dir`` (where the instance keeps the agent's files), ``--checkpoint-dir`` (the
machine's own disk or volume), ``--bind HOST:PORT`` and ``--shutdown-command`` (``""``: none).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from corral.agent import dag
from corral.agent.bell import AgentBell
from corral.agent.diskfull import RESERVE_FILE, DiskGuard
from corral.agent.events import EventLog
from corral.agent.hooks import build_hooks
from corral.agent.launchers import for_this_node
from corral.agent.listen import listen
from corral.agent.progress import ProgressTailer
from corral.agent.runner import Runner
from corral.errors import BadInput, CorralError
from corral.files import write_json_atomic
from corral.secrets.redact import Redactor, job_secret_values
from corral.wire import WIRE_VERSION
from corral.wire.bell import ENV_AGENT_BELL
from corral.wire.env import ENV_AGENT_TOKEN, NODE_INSTALL_VARS
from corral.wire.gang import GangRole, role_from_env
from corral.wire.node import NodeContext, NodeHook, iso
from corral.wire.outcome import StopCause
from corral.wire.plan import AgentPlan

if TYPE_CHECKING:
    from corral.agent.api import AgentApi, Handover
    from corral.agent.server import AgentServer


@dataclass(frozen=True)
class NodeLaunch:
    """What the node says when it starts the agent; each None: the plan's value."""

    devices: list[str] | None = None
    state_dir: str | None = None
    checkpoint_dir: str | None = None
    host: str | None = None
    port: int | None = None
    #: this node's place in a gang (a multi-node job; ``wire.gang``), None: the job's only node
    gang: GangRole | None = None
    #: "" means none (a machine that must not power itself off)
    shutdown_command: str | None = None
    #: where the code goes on this node (``--workdir``)
    workdir: str | None = None
    #: the controller's bell as the launch named it (``wire.bell.ENV_AGENT_BELL``): rung
    #: once the API answers, before any request names it (None: the first request's)
    bell: str | None = None
    #: a directory that stands for this node's "/": every absolute path of the plan (workdir,
    #: checkpoints, state, files, mounts) is taken under it (``--root``: a test machine, or a
    #: node without the rights to write where the plan says)
    root: str | None = None


def under_root(root: str | None, path: str) -> str:
    """``path`` on a node whose "/" is ``root`` (``path`` itself without a root)."""
    if not root or not os.path.isabs(path):
        return path
    return os.path.join(root, path.lstrip("/"))


def node_plan(plan: AgentPlan, node: NodeLaunch) -> AgentPlan:
    """The plan with this node's paths: the launch options' where given, else the plan's
    (under ``--root``). The plan file itself is never rewritten."""
    root = node.root
    workdir = node.workdir or under_root(root, plan.workdir)
    update = {
        "workdir": workdir,
        "checkpoint_dir": node.checkpoint_dir or under_root(root, plan.checkpoint_dir),
        "state_dir": node.state_dir or under_root(root, plan.state_dir),
    }
    if all(getattr(plan, k) == v for k, v in update.items()):
        return plan
    return plan.model_copy(update=update)


class Agent:
    """One attempt on this node: the runner, the progress tailer and the HTTP server."""

    def __init__(
        self,
        plan: AgentPlan,
        token: str,
        *,
        devices: list[str] | None = None,
        environ: dict[str, str] | None = None,
        usage: Callable[[list[str]], list[Any]] | None = None,
        now: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        hooks: list[NodeHook] | None = None,
        launch: NodeLaunch | None = None,
        handed_from: str | None = None,
        records: Path | None = None,
    ):
        if not token:
            raise BadInput(f"the agent needs a token: set {ENV_AGENT_TOKEN}")
        dag.validate(plan)
        node = launch or NodeLaunch()
        plan = node_plan(plan, node)
        if plan.code is None and node.root:  # a node of its own with nothing shipped
            Path(plan.workdir).mkdir(parents=True, exist_ok=True)
        self.plan = plan
        self.state_dir = Path(node.state_dir or plan.state_dir)
        #: where this attempt keeps its own records (events, stage logs, progress files): the
        #: state_dir, or a folder of its own in it on a node handed the attempt
        #: (:func:`attempt_records`)
        self.records = records or self.state_dir
        self.checkpoint_dir = node.checkpoint_dir or plan.checkpoint_dir
        self.bind = (
            node.host if node.host is not None else plan.host,
            node.port if node.port is not None else plan.port,
        )
        command = plan.shutdown_command if node.shutdown_command is None else node.shutdown_command
        self.shutdown_command = command or None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("logs", "progress"):
            (self.records / sub).mkdir(parents=True, exist_ok=True)
        Path(self.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        if devices is None:
            devices = node.devices
        if devices is None:
            devices = plan.devices if plan.devices is not None else _detected_ids()
        usage = usage or _gpu_usage
        secrets = Redactor(job_secret_values(os.environ if environ is None else environ))
        self.events = EventLog(
            self.records / "events.jsonl",
            now=now,
            mask=secrets.redact_data if secrets.values else None,
            # room for the agent's last records when a job fills the disk (diskfull.py)
            disk=DiskGuard(self.state_dir / RESERVE_FILE),
        )
        #: rings the controller's bell when something happens (``agent.bell``)
        self.bell = AgentBell(plan.run_id, plan.attempt, token)
        self._bell_at = node.bell
        self.events.listeners.append(self.bell.on_event)
        self.tailer = ProgressTailer(
            self.records / "progress", self.events, plan.progress_event_interval, clock=clock
        )
        if hooks is None:
            context = NodeContext(
                plan=plan,
                events=self.events,
                state_dir=str(self.state_dir),
                checkpoint_dir=self.checkpoint_dir,
                environ=dict(os.environ if environ is None else environ),
                node_rank=node.gang.rank if node.gang is not None else 0,
            )
            hooks = build_hooks(context)
        code = None
        if plan.code is not None:
            # here, not at the top: a node that runs in place (the local provider, a shared
            # filesystem) does not pay for the bundle and mount code at start-up
            from corral.agent.code import CodeStage

            workdir = plan.workdir

            def node_path(path: str) -> str:
                if os.path.isabs(path):
                    return under_root(node.root, path)
                return os.path.join(workdir, path)

            code = CodeStage(
                plan.code,
                self.events,
                workdir=workdir,
                state_dir=self.state_dir,
                node_path=node_path,
                environ=dict(os.environ if environ is None else environ),
                plan_env=plan.env,
                clock=clock,
            )
            if code.mounts.mounts and code.mounts.uploads:
                hooks = [*hooks, code.mounts]
        self.code = code
        self.hooks = hooks
        self.runner = Runner(
            plan,
            self.events,
            self.tailer,
            devices,
            environ=environ,
            now=now,
            clock=clock,
            sleep=sleep,
            hooks=self.hooks,
            state_dir=str(self.state_dir),
            logs_dir=str(self.records / "logs"),
            checkpoint_dir=self.checkpoint_dir,
            code=code,
            gang=node.gang,
        )
        self._devices = devices
        self._usage = usage
        self._api: AgentApi | None = None
        self._token = token
        #: the token of the attempt that handed this one over on this node (``POST
        #: /attempt``): it may confirm that hand-over and nothing else
        self._handed_from = handed_from
        self._now = now
        self.clock = clock
        self.finished_seen_at: float | None = None
        #: when a signal (a notice, a teardown) reached the agent process (``clock`` time)
        self.signalled_at: float | None = None
        self.server: AgentServer | None = None
        self.url = ""
        #: the port the API is bound to (known once started)
        self.port = 0

    @property
    def api(self) -> AgentApi:
        """What the HTTP endpoints answer (built on first use: :meth:`start` builds it once
        the job is under way)."""
        if self._api is None:
            # here, not at the top: the HTTP server and its endpoints (http.server, email,
            # the exec sessions, the services) load while the job starts, not before it
            from corral.agent.api import AgentApi

            self._api = AgentApi(
                self.runner,
                self.events,
                self.tailer,
                self._devices,
                self._usage,
                os.getpid(),
                clock=self.clock,
            )
        return self._api

    def start(self) -> str:
        """Bind, write ``agent.json``, start the attempt, serve; returns the API's URL.

        The address is bound first, so a port that is taken fails the start with nothing
        run; then the job starts, and the HTTP server is built around the bound socket while
        it does (a caller that connects in between waits in the socket's backlog)."""
        host, port = self.bind
        listener = listen(host, port)
        bound = int(listener.getsockname()[1])
        self.port = bound
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        self.url = f"http://{shown}:{bound}"
        try:
            write_json_atomic(
                self.state_dir / "agent.json",
                {
                    "pid": os.getpid(),
                    "port": bound,
                    "url": self.url,
                    "started_at": iso(self._now()),
                },
                mode=0o644,
            )
            self.tailer.start(self.runner.live_stages)
            self.runner.start()
        except BaseException:
            listener.close()
            raise
        try:
            from corral.agent.server import AgentServer  # see Agent.api

            self.server = AgentServer(
                listener, self.api, self._token, bell=self.bell, handed_from=self._handed_from
            )
        except BaseException:  # the job runs and nothing can reach it: stop it
            listener.close()
            self.runner.request_stop("the agent's API failed to start", StopCause.AGENT)
            self.runner.wait(self.plan.grace_seconds + 5)
            raise
        threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="http",
            daemon=True,
        ).start()
        self.api.services.start()
        self.api.ready = True
        if self._bell_at:  # the launch named the bell: say it is up now, not at a next look
            self.bell.heard_from(self._bell_at)
        return self.url

    def stop(self, reason: str = "stop requested", cause: StopCause = StopCause.AGENT) -> None:
        """Graceful stop (what ``POST /stop`` does). Idempotent."""
        self.runner.request_stop(reason, cause)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the attempt has ended; True if it has."""
        return self.runner.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Stop the attempt if it still runs, then stop serving."""
        if not self.runner.finished.is_set():
            self.stop("agent shutting down")
            self.wait(timeout)
        self.tailer.close()
        if self._api is not None:
            self._api.execs.close()
            self._api.services.close()
        for hook in self.hooks:
            try:
                hook.close()
            except Exception:
                pass
        if self.server is not None:
            self.server.stop()
        self.bell.close()
        self.events.close()
        self.events.disk.close()  # the reserve is no longer needed


#: how long a signalled agent whose attempt ended waits for a controller to read its last
#: events before it exits anyway (a controller looks at a running run at least every 2 s;
#: a second signal ends the wait at once, and it never outlasts the plan's grace period
#: counted from the signal: the machine's kill comes after that)
SIGNAL_LINGER_S = 3.0


def should_exit(agent: Agent, signalled: bool) -> bool:
    """Whether the agent process ends now.

    After the attempt ends the agent keeps serving its API (the controller still reads status,
    logs and events). When a signal stopped it (a preemption notice, a teardown), it exits
    once a controller has read every event of the ended attempt, or :data:`SIGNAL_LINGER_S`
    after the end (at the latest when the plan's grace period since the signal is over):
    a notice that ended the job within a poll of a stage's end must not take
    that stage's ``stage.finished`` with it (the next attempt would run the stage again).
    Otherwise - so that a paid machine cannot run on forever - it exits when
    ``plan.controller_timeout_s`` has passed since the later of the attempt's end and the
    controller's last call."""
    if not agent.runner.finished.is_set():
        return False
    now = agent.clock()
    if agent.finished_seen_at is None:
        agent.finished_seen_at = now
    if signalled:
        if agent.signalled_at is None:
            agent.signalled_at = now
        until = min(
            agent.finished_seen_at + SIGNAL_LINGER_S,
            agent.signalled_at + agent.plan.grace_seconds,
        )
        return agent.api.collected.is_set() or now >= until
    timeout = agent.plan.controller_timeout_s
    if not timeout:
        return False
    last = max(agent.finished_seen_at, agent.api.last_request_at or 0.0)
    return now - last >= timeout


def shutdown_machine(command: str | None) -> None:
    """Run the node's shutdown command (a cloud provider sets one that powers the machine off;
    instance-initiated shutdown is set to terminate). Never raises."""
    if not command:
        return
    try:
        subprocess.run(["bash", "-c", command], timeout=60, check=False)
    except Exception as exc:  # the agent is exiting anyway
        print(f"corral agent: shutdown command failed: {exc}", file=sys.stderr)


def _gpu_usage(ids: list[str]) -> list[Any]:
    # lazy for start-up speed (on first /status); no cycle: corral.gpu imports no agent module
    from corral import gpu

    return gpu.usage(ids)


def _detected_ids() -> list[str]:
    from corral import gpu  # lazy for start-up speed, as above

    return [g.id for g in gpu.detect()]


def _load(path: str) -> AgentPlan:
    try:
        version = json.loads(Path(path).read_text()).get("wire_version")
    except (OSError, ValueError, AttributeError):
        version = WIRE_VERSION  # the errors below say what is wrong with the file
    if version != WIRE_VERSION:
        raise BadInput(
            f"plan file {path} is for wire version {version}; this agent speaks "
            f"{WIRE_VERSION}: install the controller's corral release on this node"
        )
    try:
        plan = AgentPlan.load(path)
    except FileNotFoundError:
        raise BadInput(f"plan file {path} does not exist")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        raise BadInput(f"plan file {path}: {where}: {first['msg']}")
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="corral agent", description="Run one attempt of a corral run on this node."
    )
    parser.add_argument("--plan", required=True, help="path of the AgentPlan JSON file")
    parser.add_argument(
        "--devices", help="comma-separated GPU ids this instance was given ('': none)"
    )
    parser.add_argument("--state-dir", help="where the agent keeps its files on this node")
    parser.add_argument("--checkpoint-dir", help="where checkpoints live on this node")
    parser.add_argument("--bind", metavar="HOST:PORT", help="address the agent's API binds")
    parser.add_argument("--shutdown-command", help="run when no controller calls ('': none)")
    parser.add_argument("--workdir", help="where the job's code goes on this node")
    parser.add_argument(
        "--root", help="a directory standing for this node's '/' (the plan's paths go under it)"
    )
    args = parser.parse_args(argv)
    token = os.environ.pop(ENV_AGENT_TOKEN, "")  # gone from this process's environment
    for name in NODE_INSTALL_VARS:  # how corral got here is none of the job's business
        os.environ.pop(name, None)
    # the handlers come first: a SIGTERM (a preemption notice, say) that arrives while the
    # agent starts, or just after its API answers, is a graceful stop, never a kill
    signalled = threading.Event()
    started: list[Agent] = []
    received: list[str] = []
    again = threading.Event()  # a second signal: exit once the job has stopped, unread or not

    def on_signal(signum: int, _frame: Any) -> None:
        if signalled.is_set():
            again.set()
        signalled.set()
        received.append(f"agent received {signal.Signals(signum).name}")
        if started:
            if started[0].signalled_at is None:
                started[0].signalled_at = started[0].clock()
            started[0].stop(received[-1])

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _serve(args, token, signalled, again, started, received)
    finally:  # called in-process (tests, an embedding program): its handlers come back
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve(
    args: argparse.Namespace,
    token: str,
    signalled: threading.Event,
    again: threading.Event,
    started: list[Agent],
    received: list[str],
) -> int:
    """Start the agent, serve until :func:`should_exit`, then close it; the exit code."""
    try:
        launch = _launch(args)
        agent = Agent(for_this_node(_load(args.plan), launch.gang, args.plan), token, launch=launch)
        url = agent.start()
    except CorralError as exc:
        print(f"corral agent: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # e.g. the port is taken
        print(f"corral agent: error: {exc.strerror or exc}", file=sys.stderr)
        return BadInput.exit_code
    started.append(agent)
    if received:  # signalled while starting: stop now
        agent.stop(received[-1])
    print(f"corral agent: serving on {url}", file=sys.stderr, flush=True)

    while True:
        while not should_exit(agent, signalled.is_set()) and not agent.api.handed_over.is_set():
            if not signalled.is_set():
                signalled.wait(0.5)
            elif not agent.runner.finished.is_set():
                agent.runner.finished.wait(0.5)
            elif again.is_set():
                break
            else:  # short waits: a second signal (the machine's teardown) ends this one too
                agent.api.collected.wait(0.02)
        if signalled.is_set() or agent.api.handover is None:
            break
        try:  # the controller kept this node for the run's next attempt (a gang's repair)
            agent = _next_attempt(agent, agent.api.handover, launch)
        except (CorralError, OSError) as exc:
            print(f"corral agent: error: the next attempt did not start: {exc}", file=sys.stderr)
            return BadInput.exit_code
        started[0] = agent
        if received:
            agent.stop(received[-1])
    lost_controller = not signalled.is_set()
    agent.close(timeout=5)
    if lost_controller:
        print(
            "corral agent: the job ended and no controller called for "
            f"{agent.plan.controller_timeout_s:.0f}s: exiting",
            file=sys.stderr,
            flush=True,
        )
        shutdown_machine(agent.shutdown_command)
    return 0


def attempt_records(state_dir: Path, attempt: int) -> Path:
    """Where attempt ``attempt``, handed to a node whose ended attempt had the same
    ``state_dir`` (the launch's ``--state-dir``: the provider's folder for the machine), keeps
    its own records (``events.jsonl``, ``logs/``, ``progress/``): a folder of its own in it,
    so that its event feed and stage logs begin with it (the controller reads a new attempt's
    from their start) and the ended attempt's stay as they were. The rest of the
    ``state_dir`` stays the node's: ``agent.json`` and ``children.json``, which the node's
    provider reads, where they were. (A plan's own ``state_dir`` is the attempt's already.)"""
    return state_dir / "attempts" / f"a{attempt}"


def _next_attempt(agent: Agent, handover: Handover, launch: NodeLaunch) -> Agent:
    """The agent of the attempt ``handover`` gives this node, on the same address as
    ``agent``'s (its endpoint stays the one the controller knows), once ``agent`` is closed."""
    host, port = agent.bind[0], agent.port
    agent.close(timeout=5)
    # the bell the last attempt's controller named (rung by the next attempt from its start)
    rung = agent.bell.address.header() if agent.bell.address is not None else launch.bell
    launch = replace(launch, gang=handover.gang, host=host, port=port, bell=rung)
    # (the ended attempt's token may still confirm this hand-over: a controller that lost
    # the answer asks again with it)
    # the ended attempt's state_dir again (the launch's: ``--state-dir``): its records apart
    same = Path(node_plan(handover.plan, launch).state_dir) == agent.state_dir
    nxt = Agent(
        handover.plan,
        handover.token,
        launch=launch,
        handed_from=agent._token,
        records=attempt_records(agent.state_dir, handover.plan.attempt) if same else None,
    )
    url = nxt.start()
    print(
        f"corral agent: attempt {handover.plan.attempt} handed over: serving on {url}",
        file=sys.stderr,
        flush=True,
    )
    return nxt


def _launch(args: argparse.Namespace) -> NodeLaunch:
    """The launch options as a :class:`NodeLaunch`; a bad ``--bind`` is :class:`BadInput`."""
    host = port = None
    if args.bind:
        host, _, raw = args.bind.rpartition(":")
        try:
            port = int(raw)
        except ValueError:
            raise BadInput(f"--bind {args.bind!r}: expected HOST:PORT") from None
        if not host or not 0 <= port <= 65535:
            raise BadInput(f"--bind {args.bind!r}: expected HOST:PORT")
    devices = None
    if args.devices is not None:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    return NodeLaunch(
        gang=role_from_env(os.environ, pop=True),  # none of the job's business
        bell=os.environ.pop(ENV_AGENT_BELL, "") or None,
        devices=devices,
        state_dir=args.state_dir or None,
        checkpoint_dir=args.checkpoint_dir or None,
        host=host,
        port=port,
        shutdown_command=args.shutdown_command,
        workdir=args.workdir or None,
        root=args.root or None,
    )
