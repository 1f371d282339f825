"""A node that shares nothing with the controller, on this machine (the fake cloud's machines,
the test stand-ins of cloud instances): its own root directory and its own environment.

The agent runs with ``--root <root>``: every absolute path of its plan (the workdir the code is
shipped to, checkpoints, its state, ``files:`` and ``mounts:`` targets) lives under ``root``,
as it would on the machine's own disk. Its environment holds only what a fresh machine's would:
``PATH`` and the locale, ``HOME``/``TMPDIR`` inside its root, a ``CORRAL_HOME`` of its own, and
``PYTHONPATH`` when this process has one (how a development checkout of corral is "installed"
on the machine). Nothing of the controller's environment, home or files reaches it: what the
job needs travels in the plan, the bootstrap env, the code bundle and object storage.
"""

from __future__ import annotations

import os
from pathlib import Path

#: what a fresh machine's environment shares with this one
PASSED = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "SYSTEMROOT")


def node_root(machine_dir: Path) -> Path:
    """The directory standing for the node's ``/``."""
    return machine_dir / "fs"


def node_env(root: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a node rooted at ``root`` starts its agent with (see the module doc)."""
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in PASSED if source.get(k)}
    env.setdefault("LANG", "C.UTF-8")
    home, tmp, corral = root / "root", root / "tmp", root / "var" / "lib" / "corral"
    for d in (home, tmp, corral):
        d.mkdir(parents=True, exist_ok=True)
    env.update({"HOME": str(home), "TMPDIR": str(tmp), "CORRAL_HOME": str(corral)})
    return env
