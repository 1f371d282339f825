"""The job's commands in its ``image:``, on a node that is not that image (see
``corral.wire.container`` for which engine, ``docs/shipping.md`` for the design).

The agent stays on the host; each setup command and stage becomes, for the stage shim
(``procs.py``), ``ENGINE run --rm --init --network host ... IMAGE bash -c WRAPPER``, the
engine's client in a process group of its own to which the shim's bash passes each signal:

- ``--network host``: the job's services and ``corral.sdk`` meet the agent on loopback as on
  the host; the workdir, the checkpoint directory, the agent's state (logs, progress files) and
  the plan's absolute mount directories are bind-mounted at the same absolute paths, and the
  command runs in the workdir;
- the job's environment goes by name only (``--env NAME``: the engine takes the value from its
  own environment, which the shim hands it), so no value, secret or not, is on a command line;
  ``CUDA_VISIBLE_DEVICES`` is renumbered (the container sees only its GPUs, as 0..n-1) and the
  GPUs go as ``--gpus "device=..."`` (docker + NVIDIA toolkit) or CDI devices (podman);
- signals: the engine's client proxies what the agent sends (SIGTERM, a save signal) to the
  container's init, which hands it to WRAPPER; WRAPPER runs the command in a process group of
  its own and passes each signal to that whole group (as the agent does on the host), then
  exits with the command's code, so a job's 75 survives a stop;
- the container is named (``corral-<run>-<attempt>-<stage>-<n>``) and removed at the end
  (``--rm``; ``ENGINE rm -f`` after the stage too, for one whose client was SIGKILLed).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

from corral.wire.container import (
    ENV_CONTAINER_GPUS,
    ENV_IMAGE_PASSWORD,
    ENV_IMAGE_REGISTRY,
    ENV_IMAGE_USERNAME,
    IMAGE_AUTH_ENV,
    engine_kind,
    find_engine,
    no_engine_reason,
)
from corral.wire.env import ENV_SECRET_NAMES
from corral.wire.plan import AgentPlan, StagePlan

#: read by the stage shim (agent/shim.py, which imports nothing of corral)
ENV_ON_DEATH = "CORRAL_SHIM_ON_AGENT_DEATH"
#: where the wrapper finds the command (a variable: no quoting, not in the process list)
ENV_COMMAND = "CORRAL_STAGE_COMMAND"
ENV_SAVE_COMMAND = "CORRAL_SAVE_COMMAND"
#: the signals the wrapper passes on to the command's group (procs.py's stop and save signals)
_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2")
#: runs in the image under its init: the command in a group of its own, every signal passed
#: to that group, the command's exit code kept (waited for again after each signal)
WRAPPER = (
    'set -m; bash -c "$'
    + ENV_COMMAND
    + '" & job=$!; set +m; '
    + " ".join(f"trap 'kill -s {s} -- -$job 2>/dev/null' {s};" for s in _SIGNALS)
    + " while :; do wait $job; code=$?; kill -0 $job 2>/dev/null || break; done; exit $code"
)
#: on the host: the engine's client in a process group of its own, each signal the stage's
#: group gets passed to the client alone (which proxies it into the container): a signal to
#: the whole group would also hit the helpers the client starts to deliver it (`runc kill`)
_ON_HOST = (
    "set -m; {argv} & client=$!; set +m; "
    + " ".join(f"trap 'kill -s {s} $client 2>/dev/null' {s};" for s in _SIGNALS)
    + " while :; do wait $client; code=$?; kill -0 $client 2>/dev/null || break; done; exit $code"
)


def _on_host(argv: str) -> str:
    return _ON_HOST.replace("{argv}", argv)


#: variables of the agent's host that never go into the image (the image has its own)
HOST_ONLY = frozenset(
    {"PATH", "HOME", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_", ENV_COMMAND, ENV_SAVE_COMMAND}
    | {ENV_ON_DEATH}
)
PULL_TIMEOUT_S = 3600.0
_NAME_OK = re.compile(r"[^a-zA-Z0-9_.-]+")


@dataclass
class Container:
    """How this attempt's commands run in ``image`` through ``engine`` (its argv prefix)."""

    engine: list[str]
    image: str
    workdir: str
    dirs: list[str]
    prefix: str = "corral"
    #: the node's GPU ids are devices the engine can pass (not a simulated machine's)
    real_gpus: bool = True
    _count: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def kind(self) -> str:
        return engine_kind(self.engine)

    def name_for(self, stage: str) -> str:
        return _NAME_OK.sub("-", f"{self.prefix}-{stage}-{next(self._count)}").strip("-.")

    def wrap(
        self,
        name: str,
        command: str,
        env: dict[str, str],
        names: Iterable[str],
        gpus: list[str],
        save_command: str | None = None,
    ) -> tuple[str, dict[str, str]]:
        """The shim's command and environment for ``command`` in the image: ``names`` are the
        job's variables (passed by name), ``gpus`` the host devices it was given."""
        argv = self.run_argv(name, names, gpus)
        # the shim removes the container if the agent dies (the engine would keep it running)
        env = {
            **env,
            ENV_COMMAND: command,
            ENV_ON_DEATH: shlex.join(self.remove_argv(name)),
        }
        if save_command:
            env[ENV_SAVE_COMMAND] = save_command
        return _on_host(shlex.join(argv)), env

    def run_argv(self, name: str, names: Iterable[str], gpus: list[str]) -> list[str]:
        argv = [*self.engine, "run", "--rm", "--init", "--network", "host", "--name", name]
        for path in dict.fromkeys(self.dirs):  # those there now (a mount made by the code stage)
            if os.path.isdir(path):
                argv += ["--volume", f"{path}:{path}"]
        argv += ["--workdir", self.workdir]
        passed = sorted(set(names) - HOST_ONLY - set(IMAGE_AUTH_ENV) - {"CUDA_VISIBLE_DEVICES"})
        for var in [*passed, ENV_COMMAND]:
            argv += ["--env", var]
        argv += ["--env", "CUDA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(len(gpus)))]
        argv += self.gpu_args(gpus)
        return [*argv, self.image, "bash", "-c", WRAPPER]

    def gpu_args(self, gpus: list[str]) -> list[str]:
        if not gpus or not self.real_gpus:
            return []
        if self.kind == "docker":  # the NVIDIA toolkit's --gpus; a list needs the quotes
            return ["--gpus", '"device=' + ",".join(gpus) + '"']
        out: list[str] = []
        for gpu in gpus:  # podman: the NVIDIA toolkit's CDI names
            out += ["--device", f"nvidia.com/gpu={gpu}"]
        return out

    def exec_command(self, name: str, names: Iterable[str]) -> str:
        """A stage's ``save_command`` run in the stage's running container; the host shell
        reads it from ``$CORRAL_SAVE_COMMAND`` (see :meth:`wrap`)."""
        argv = [*self.engine, "exec"]
        for var in sorted(set(names) - HOST_ONLY - set(IMAGE_AUTH_ENV)):
            argv += ["--env", var]
        argv += ["--workdir", self.workdir, name, "bash", "-c"]
        return "exec " + shlex.join(argv) + f' "${ENV_SAVE_COMMAND}"'

    def remove_argv(self, name: str) -> list[str]:
        """Removes the container if it is still there (its client was killed)."""
        return [*self.engine, "rm", "-f", name]

    def pull(self, environ: dict[str, str]) -> str | None:
        """Make the image present (log in first with the registry credentials the agent was
        given); None, or why not in one line (the engine's last words, secrets masked)."""
        if self._engine_ok(["image", "inspect", self.image]) is None:
            return None
        user, password = environ.get(ENV_IMAGE_USERNAME), environ.get(ENV_IMAGE_PASSWORD)
        if user and password:
            login = ["login", "--username", user, "--password-stdin"]
            registry = environ.get(ENV_IMAGE_REGISTRY)
            problem = self._engine_ok([*login, *([registry] if registry else [])], password)
            if problem:
                return f"registry login failed: {_masked(problem, password)}"
        problem = self._engine_ok(["pull", self.image])
        if problem:
            return f"image {self.image!r} could not be pulled: {_masked(problem, password)}"
        return None

    def _engine_ok(self, args: list[str], stdin: str | None = None) -> str | None:
        try:
            proc = subprocess.run(
                [*self.engine, *args],
                input=stdin or "",
                capture_output=True,
                text=True,
                timeout=PULL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        if proc.returncode == 0:
            return None
        lines = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        return lines[-1] if lines else f"exit code {proc.returncode}"


def _masked(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def job_names(env: dict[str, str], host: dict[str, str], chosen: Iterable[str]) -> list[str]:
    """The variables of a command's ``env`` that are the job's, not the host's: those the
    agent set or changed, and those the spec or the secrets ``chosen``."""
    names = {k for k, v in env.items() if host.get(k) != v} | {k for k in chosen if k in env}
    return sorted(names - HOST_ONLY - set(IMAGE_AUTH_ENV))


def dirs_of(made: Iterable[str], others: Iterable[str]) -> list[str]:
    """The absolute directories to mount: ``made`` (the workdir, the checkpoint and state
    directories) created now when missing, so the job's writes land on the host; ``others``
    (mounts) mounted if they are there when a command starts."""
    for path in made:
        os.makedirs(path, exist_ok=True)
    return [os.path.normpath(p) for p in [*made, *others] if os.path.isabs(p)]


def for_plan(
    plan: AgentPlan, state_dir: str, checkpoint_dir: str, environ: dict[str, str]
) -> Container | str | None:
    """How the plan's commands run: in its image (a :class:`Container`), on the host (None:
    no image to run through an engine), or not at all (why, in one line: no engine)."""
    if plan.container is None:
        return None
    engine = find_engine(plan.container.engine, environ)
    if engine is None:
        return no_engine_reason(plan.container.image, environ)
    mounts = [m.path for m in plan.code.mounts] if plan.code is not None else []
    return Container(
        engine=engine,
        image=plan.container.image,
        workdir=plan.workdir,
        dirs=dirs_of([plan.workdir, checkpoint_dir, state_dir], mounts),
        prefix=f"corral-{plan.run_id}-{plan.attempt}",
        real_gpus=environ.get(ENV_CONTAINER_GPUS) != "none",
    )


def chosen_names(plan: AgentPlan, stage: StagePlan | None, environ: dict[str, str]) -> set[str]:
    """The variables the job chose (its spec's env, the stage's, its secrets): passed into
    the image even when the agent's own environment holds the same value."""
    secrets = {n for n in environ.get(ENV_SECRET_NAMES, "").split(",") if n}
    return {*plan.env, *(stage.env if stage else {}), *secrets, ENV_SECRET_NAMES}
