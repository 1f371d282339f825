"""Run corral's agent for one attempt on this worker, watch it, stop it.

The agent is a child process in its own process group (its stages each get one more) that
dies with the process that started it (``PR_SET_PDEATHSIG``): the worker's process for this
attempt dies with its Celery worker the same way (:mod:`corral.queue.slot`), and each stage's
shim kills its group when the agent dies. So a worker killed with ``kill -9`` takes its whole
attempt with it, as a lost machine would, and nothing of the attempt runs on unwatched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from corral.errors import BadInput
from corral.files import write_atomic
from corral.queue.limits import AttemptLimits
from corral.wire.env import ENV_AGENT_TOKEN
from corral.wire.plan import AgentPlan

PR_SET_PDEATHSIG = 1
#: seconds between SIGKILL and giving up on a process
KILL_WAIT_S = 5.0
#: how long past its grace period a stopping agent gets before SIGKILL
STOP_MARGIN_S = 5.0


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


#: variables read as Python starts (not later, as the agent's own settings are): an attempt
#: whose agent needs other values than a warm agent started with gets a fresh agent instead
STARTUP_PREFIXES = ("PYTHON", "LD_")


def _startup_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


class WarmAgent:
    """An agent process started before its attempt (``python -m corral.agent.warm``): Python
    up and the agent's modules loaded while the worker is idle, so the attempt it is given
    starts at once. Used once; started as a cold agent is (its own process group, dying with
    the process that started it)."""

    def __init__(self, log: Path, python: str = sys.executable):
        self.log = log
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self._startup: dict[str, str] = {}

    def start(self) -> None:
        """Start it (its output until it has an attempt goes to ``log``). Never raises: a
        worker without one starts its attempt's agent as it always did."""
        self._startup = _startup_vars(os.environ)
        try:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log, "ab") as out:
                self.proc = subprocess.Popen(
                    [self.python, "-m", "corral.agent.warm"],
                    cwd=self.log.parent,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=die_with_parent,
                )
        except OSError:
            self.proc = None

    def take(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        out: Path,
        limits: AttemptLimits | None = None,
    ) -> subprocess.Popen[bytes] | None:
        """Give it the attempt: ``corral agent ARGS`` in ``env`` and ``cwd``, its output to
        ``out``, under ``limits``. The process running it, or None when it cannot (none was
        started, it died, or the attempt needs another Python start-up environment): the
        caller starts an agent of its own."""
        proc, self.proc = self.proc, None
        if proc is None or proc.stdin is None:
            return None
        if proc.poll() is not None or _startup_vars(env) != self._startup:
            self._drop(proc)
            return None
        if limits is not None:
            limits.enter(proc.pid)
        order = {"argv": args, "env": env, "cwd": str(cwd), "out": str(out)}
        try:
            proc.stdin.write(json.dumps(order).encode() + b"\n")
            proc.stdin.close()
        except OSError:  # it died meanwhile
            self._drop(proc)
            return None
        return proc

    def close(self) -> None:
        """Stop it if it is still waiting for an attempt."""
        proc, self.proc = self.proc, None
        if proc is not None:
            self._drop(proc)

    @staticmethod
    def _drop(proc: subprocess.Popen[bytes]) -> None:
        """It has run nothing (no order reached it): killed, not waited for."""
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_WAIT_S)


@dataclass(frozen=True)
class Bootstrap:
    """What the controller sent for the attempt (``providers.base.Bootstrap`` as JSON)."""

    plan: AgentPlan
    token: str
    env: dict[str, str]

    @classmethod
    def parse(cls, raw: str) -> Bootstrap:
        data = json.loads(raw)
        return cls(
            plan=AgentPlan.model_validate(data["plan"]),
            token=str(data["token"]),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        )


class AgentProcess:
    """The agent of one attempt, under ``attempt_dir`` (plan.json, agent.out, agent/)."""

    def __init__(
        self,
        attempt_dir: Path,
        bootstrap: Bootstrap,
        *,
        gpus: list[str],
        bind_host: str,
        advertise_host: str,
        checkpoint_dir: str | None = None,
        root: str = "",
        limits: AttemptLimits | None = None,
        python: str = sys.executable,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.dir = attempt_dir
        self.state_dir = attempt_dir / "agent"
        self.boot = bootstrap
        self.gpus = gpus
        self.bind_host = bind_host
        self.advertise_host = advertise_host
        self.checkpoint_dir = checkpoint_dir
        self.root = root
        self.limits = limits
        self.python = python
        self.clock = clock
        self.proc: subprocess.Popen[bytes] | None = None
        #: whether the agent is a warm one (started before the attempt came)
        self.warm = False

    def start(self, warm: WarmAgent | None = None) -> int:
        """Write the plan and start the agent (``warm``'s, when it can take the attempt);
        returns its pid. :class:`BadInput` when the attempt cannot run here (its workdir is
        missing on this machine)."""
        plan = self.boot.plan
        shipped = plan.code is not None  # the agent fetches the code into the plan's workdir
        if not shipped and not Path(plan.workdir).is_dir():
            raise BadInput(
                f"the job's workdir {plan.workdir} does not exist on this worker "
                "(share it with the worker, e.g. on NFS, at the same path)"
            )
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        plan_path = self.dir / "plan.json"
        write_atomic(plan_path, plan.model_dump_json(indent=2), mode=0o600)
        args = ["--devices", ",".join(self.gpus), "--state-dir", str(self.state_dir)]
        args += ["--bind", f"{self.bind_host}:0"]
        if shipped and self.root:  # the plan's paths are this machine's, under its root
            args += ["--root", self.root]
        if self.checkpoint_dir:
            ckpt = Path(self.checkpoint_dir) / plan.run_id
            args += ["--checkpoint-dir", str(ckpt)]
        args += ["--plan", str(plan_path)]
        env = {**os.environ, **self.boot.env, ENV_AGENT_TOKEN: self.boot.token}
        limits = self.limits
        if limits is not None:
            limits.prepare()
        cwd = self.dir if shipped else Path(plan.workdir)
        if warm is not None:
            self.proc = warm.take(args, env, cwd, self.dir / "agent.out", limits)
            if self.proc is not None:
                self.warm = True
                return self.proc.pid

        def enter() -> None:  # in the agent's process, before it execs
            die_with_parent()
            if limits is not None:
                limits.enter()

        with open(self.dir / "agent.out", "ab") as out, open(os.devnull, "rb") as devnull:
            self.proc = subprocess.Popen(
                [self.python, "-m", "corral.agent", *args],
                cwd=cwd,
                env=env,
                stdin=devnull,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=enter,
            )
        return self.proc.pid

    def endpoint(self) -> str | None:
        """The agent's API as the controller reaches it, once the agent wrote its port."""
        try:
            data = json.loads((self.state_dir / "agent.json").read_text())
            port = int(data["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return f"http://{self.advertise_host}:{port}"

    def last_words(self, limit: int = 200) -> str:
        """The last line the agent wrote to ``agent.out`` (its error, when it failed)."""
        try:
            with open(self.dir / "agent.out", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
        except OSError:
            return ""
        lines = [ln for ln in lines if ln]
        return lines[-1][:limit] if lines else ""

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def over_limit(self) -> str | None:
        """The reason, once, when the job went over its memory limit: its processes are
        killed (not the agent: it reports the stage's end) right after the caller is told."""
        if self.limits is None or self.proc is None or self.proc.poll() is not None:
            return None
        return self.limits.check(self.proc.pid)

    def kill_job(self) -> None:
        """SIGKILL the job's processes (everything under the agent), not the agent."""
        if self.proc is not None and self.proc.poll() is None:
            AttemptLimits.kill_job(self.proc.pid, self._stage_groups())

    def _stage_groups(self) -> list[int]:
        """Process groups of the stages the agent lists in children.json that are still
        the ones it started (same leader create time)."""
        try:
            items = json.loads((self.state_dir / "children.json").read_text())
        except (OSError, ValueError):
            return []
        out = []
        for item in items if isinstance(items, list) else []:
            try:
                pgid, ct = int(item["pgid"]), float(item["create_time"])
                if abs(psutil.Process(pgid).create_time() - ct) <= 0.05:
                    out.append(pgid)
            except (KeyError, TypeError, ValueError, psutil.Error):
                continue
        return out

    def _killpg(self, pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM the agent (it stops its stages with the plan's grace period, the SDK
        checkpoints), SIGKILL its group and its stages' groups after ``grace_s`` and a
        margin. Returns the agent's exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s + STOP_MARGIN_S)
        return self.kill()

    def kill(self) -> int | None:
        """SIGKILL the agent's group and its stages' groups now."""
        if self.proc is None:
            return None
        groups = self._stage_groups()
        if self.proc.poll() is None:  # once reaped, its pid (and group id) may be reused
            self._killpg(self.proc.pid, signal.SIGKILL)
        for pgid in groups:
            self._killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(KILL_WAIT_S)
        return self.proc.poll()
