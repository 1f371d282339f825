"""A node that shares nothing with the controller, on this machine (the fake cloud's machines,
the test stand-ins of cloud instances and containers): its own root directory, its own
environment, and, where this machine allows it, its own view of the file tree.

The agent runs with ``--root <root>``: every absolute path of its plan (the workdir the code is
shipped to, checkpoints, its state, ``files:`` and ``mounts:`` targets) lives under ``root``,
as it would on the machine's own disk. Its environment holds only what a fresh machine's would:
``PATH`` and the locale, ``HOME``/``TMPDIR`` inside its root, a ``CORRAL_HOME`` of its own, and
``PYTHONPATH`` when this process has one (how a development checkout of corral is "installed"
on the machine). Nothing of the controller's environment, home or files reaches it: what the
job needs travels in the plan, the bootstrap env, the code bundle and object storage.

Same paths on every machine (:class:`NodeView`). On a real cloud every machine of a run sees
its workdir at the same absolute path, and tools rely on it (Ultralytics keeps its absolute
``save_dir`` in ``last.pt`` and writes there after a resume). So, where this machine can give
a process a mount namespace of its own (Linux, root, ``unshare`` and ``mount``: CI, a
container), the node's processes start in a private mount namespace in which the machine's own
directory is bind-mounted over :data:`NODE_MOUNT` (``/mnt``, a directory every Linux machine
has and that holds the instance store on EC2): every machine's root is ``/mnt/fs``, its
workdir ``/mnt/fs/corral/runs/<run id>/work``, and a path written by one machine is, on the
next, that machine's own. The directory of the cloud's machines is covered by an empty one
there, but for the machine's own (its host reads and writes the agent's files at their real
paths): no machine sees another's files. The mounts live as long as the node's processes;
nothing is mounted in this process's namespace. Elsewhere (a laptop, not root) each machine's
paths are under its own directory, as before. A machine that is gone takes its disk with it
(:meth:`NodeView.erase`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: what a fresh machine's environment shares with this one
PASSED = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "SYSTEMROOT")

#: where a node's processes see their machine's directory, on every machine (see module doc)
NODE_MOUNT = "/mnt"
#: ``unshare``'s options: a new mount namespace whose mounts stay in it
_PRIVATE = ("--mount", "--propagation", "private", "--")


def _namespace_argv(machine_dir: str, argv: list[str], hide: str | None = None) -> list[str] | None:
    """``argv`` run in a new mount namespace where ``machine_dir`` is bind-mounted over
    :data:`NODE_MOUNT` and, with ``hide`` (a directory above it: the cloud's machines), an
    empty directory is mounted over ``hide`` and ``machine_dir`` alone mounted back in it.
    None without the tools. Absolute paths: the node's ``PATH`` may have none of them."""
    tools = [shutil.which(t) for t in ("unshare", "sh", "mount", "mkdir")]
    unshare, sh, mount, mkdir = tools
    if not (unshare and sh and mount and mkdir):
        return None
    script = f'set -e; {mount} --bind "$0" {NODE_MOUNT}; '
    if hide is not None:
        script += (
            f'{mount} -t tmpfs -o mode=755,size=1m corral-machines "$1"; {mkdir} -p "$0"; '
            f'{mount} --bind {NODE_MOUNT} "$0"; cd "$(pwd -P)" 2>/dev/null || true; shift; '
        )
    tail = [machine_dir] if hide is None else [machine_dir, hide]
    return [unshare, *_PRIVATE, sh, "-c", script + 'exec "$@"', *tail, *argv]


def node_root(machine_dir: Path) -> Path:
    """The directory standing for the node's ``/``."""
    return machine_dir / "fs"


def node_env(
    root: Path, environ: dict[str, str] | None = None, *, seen_as: str | None = None
) -> dict[str, str]:
    """The environment a node rooted at ``root`` starts its agent with (see the module doc).
    ``seen_as``: the path the node's processes see ``root`` at (default: ``root`` itself)."""
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in PASSED if source.get(k)}
    env.setdefault("LANG", "C.UTF-8")
    named = {"HOME": "root", "TMPDIR": "tmp", "CORRAL_HOME": "var/lib/corral"}
    for name, sub in named.items():
        (root / sub).mkdir(parents=True, exist_ok=True)
        env[name] = os.path.join(seen_as or str(root), sub)
    return env


@functools.cache
def private_mounts() -> bool:
    """True if this machine can start a process in a mount namespace of its own with a
    directory bind-mounted over :data:`NODE_MOUNT` (tried once per process)."""
    if sys.platform != "linux" or os.geteuid() != 0 or not os.path.isdir(NODE_MOUNT):
        return False
    with tempfile.TemporaryDirectory() as probe:
        argv = _namespace_argv(probe, ["true"])
        if argv is None:
            return False
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


class NodeView:
    """How the processes of a node whose files are in ``machine_dir`` see them: at
    :data:`NODE_MOUNT` in a mount namespace of their own where :func:`private_mounts` (the
    same paths on every machine), else where they are."""

    def __init__(self, machine_dir: Path, *, hide: Path | None = None) -> None:
        self.machine_dir = Path(machine_dir)
        #: a directory above ``machine_dir`` (the cloud's machines) of which the node sees
        #: nothing but its own machine's directory
        self.hide = hide
        self.isolated = private_mounts()

    def path(self, inside: Path) -> str:
        """``inside`` (a path in the machine's directory) as the node's processes see it."""
        if not self.isolated:
            return str(inside)
        rel = Path(inside).relative_to(self.machine_dir)
        return os.path.join(NODE_MOUNT, rel) if rel.parts else NODE_MOUNT

    @property
    def root(self) -> str:
        """The node's ``/`` (``--root``, ``CORRAL_NODE_ROOT``) as its processes see it."""
        return self.path(node_root(self.machine_dir))

    def env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """:func:`node_env` of this node, its paths as the node sees them."""
        return node_env(node_root(self.machine_dir), environ, seen_as=self.root)

    def argv(self, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` as a process of this node. The process keeps
        its pid (``unshare`` and ``sh`` exec into it), so it is tracked as ever."""
        hide = None if self.hide is None else str(self.hide)
        wrapped = _namespace_argv(str(self.machine_dir), argv, hide) if self.isolated else None
        return list(argv) if wrapped is None else wrapped

    def erase(self, *disks: Path, keep: bool = False) -> None:
        """The machine is gone and its disk with it: the node's root and ``disks`` (its
        other directories) are deleted, so no later machine reads anything of them. Call it
        once its processes are stopped. ``keep``: renamed ``<name>.gone`` instead (still in
        the machine's own directory, which no other machine sees), for a test to inspect; the
        first time only (a later erase deletes what was written since)."""
        for d in (node_root(self.machine_dir), *disks):
            gone = d.with_name(d.name + ".gone")
            if not keep or gone.exists():
                # erased before (a reclaim, then the terminate): what is there now was written
                # after the machine went (a dying process's last file), not its disk
                shutil.rmtree(d, ignore_errors=True)
            elif d.exists():
                d.rename(gone)
