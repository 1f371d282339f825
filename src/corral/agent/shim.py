"""The leader of every stage's process group: runs ``bash -c COMMAND`` and keeps its exit code
meaningful when the stage is stopped.

Why: a stop sends SIGTERM to the whole group. With ``cd x && python train.py`` bash dies at
once (143) while python saves a checkpoint and exits 75 ("preempted, resume me"); the 75 would
be lost. This shim ignores the SIGTERM itself, is a child subreaper (orphaned descendants are
reparented to it), and after a stop waits for every descendant: if one of them exited 75, so
does the shim; otherwise it exits with bash's code. Without a stop it exits as soon as bash
does, with bash's code (leftovers are the agent's business).

It also dies with its agent: if the agent process goes away (killed, crashed), the shim kills
its whole group and the groups of its descendants (a launcher's ranks), after running
``$CORRAL_SHIM_ON_AGENT_DEATH`` if set (a stage in a container: its engine removes it), so a
stage never runs on unwatched (a new attempt could otherwise run the same job twice on one machine).

It outlives every signal a stage may be stopped or asked to save with (SIGTERM, SIGINT,
SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2: each counts as a stop), so the job's own handling decides.

It runs as ``python -S -I shim.py COMMAND [AGENT_PID]`` (no site, no corral imports: fast).
"""

import os
import signal
import sys

PREEMPTED = 75  # corral.wire.env.EXIT_PREEMPTED (not imported: this file stands alone)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: what the shim hears when its agent dies (a real-time signal: SIGUSR1/2 are the job's)
DEATH_SIGNAL: int = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
#: signals the agent sends a stage's group: a stop, or a request to save first
STOP_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:  # not Linux: no subreaper, no death signal; bash's code is still reported
        pass


def _descendant_groups() -> set[int]:
    """Groups of this shim's descendants outside its own (ranks a launcher started in a session
    of their own); they are below the shim, their subreaper, while it lives."""
    parents: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return set()
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
                parents[int(name)] = (int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue
    below, todo = set(), [os.getpid()]
    while todo:
        current = todo.pop()
        for pid, (ppid, _) in parents.items():
            if ppid == current and pid not in below:
                below.add(pid)
                todo.append(pid)
    return {parents[pid][1] for pid in below} - {os.getpgrp()}


#: a command that ends what the group started outside itself (a stage's container, which an
#: engine keeps running when its client dies): started, on its own, before the group is killed
ENV_ON_DEATH = "CORRAL_SHIM_ON_AGENT_DEATH"


def _die_with_group(*_: object) -> None:
    groups = _descendant_groups()  # before the cleanup starts: it is not to be killed
    on_death = os.environ.get(ENV_ON_DEATH)
    if on_death:  # in a session of its own: what kills this group must not cut it short
        import subprocess

        try:
            subprocess.Popen(
                ["bash", "-c", on_death],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:  # the group goes whatever happened
            pass
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _follow_agent(agent_pid: int | None) -> None:
    """DEATH_SIGNAL when the agent dies (the parent-death signal), and the group goes too."""
    signal.signal(DEATH_SIGNAL, _die_with_group)
    _prctl(PR_SET_PDEATHSIG, DEATH_SIGNAL)
    if agent_pid is not None and os.getppid() != agent_pid:  # it died before we asked
        _die_with_group()


def main() -> int:
    command = sys.argv[1]
    _follow_agent(int(sys.argv[2]) if len(sys.argv) > 2 else None)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    stopped = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stopped.append(True))
    pid = os.fork()
    if pid == 0:
        for number in (*STOP_SIGNALS, DEATH_SIGNAL):
            signal.signal(number, signal.SIG_DFL)
        os.execvp("bash", ["bash", "-c", command])
    bash_code = None
    preempted = False
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        code = os.waitstatus_to_exitcode(status)
        if child == pid:
            bash_code = code
            if not stopped:
                break
        elif code == PREEMPTED:
            preempted = True
    if bash_code is None:
        bash_code = 1
    code = 128 - bash_code if bash_code < 0 else bash_code
    if stopped and (preempted or code == PREEMPTED):
        code = PREEMPTED
    return code


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main())
