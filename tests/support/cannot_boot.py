"""A machine that cannot boot corral, for the boot-failure tests of every simulated provider:
the real node bootstrap on an "image" whose PATH has a shell and basic tools but no python (and
no corral runtime shipped), and the controller ticked until the run ends."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from corral import __version__
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.providers.base import Provider
from corral.providers.common import wheel
from corral.store import Store
from corral.store.records import RunRecord
from support.waiting import wait_until

#: what the bootstrap says on such an image, once, before its exit 78
NO_PYTHON = (
    "no python on this machine and no corral runtime shipped (give the run object storage, "
    "or use an image with python 3.11 or later)"
)
TOOLS = ("bash", "sh", "env", "cat", "cp", "mv", "rm", "mkdir", "tar", "gzip", "grep", "cut")
TOOLS += ("uname", "sha256sum", "basename", "dirname", "sleep", "ls", "head", "tail", "sed")


def bare_bin(tmp: Path) -> Path:
    """A bin folder of basic tools and no python."""
    bare = tmp / "image-bin"
    bare.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        found = next(
            (d / tool for d in (Path("/usr/bin"), Path("/bin")) if (d / tool).exists()), None
        )
        if found is not None and not (bare / tool).exists():
            (bare / tool).symlink_to(found)
    return bare


#: a corral runtime shipped over HTTPS (where nothing answers): an image must fetch it
RUNTIME_OVER_HTTPS = {
    "CORRAL_RUNTIME_URL": "https://127.0.0.1:9/corral-runtime.tar.gz",
    "CORRAL_RUNTIME_SHA256": "0" * 64,
    "CORRAL_RUNTIME_ARCH": os.uname().machine,
    "CORRAL_VERSION": __version__,
}
#: what the bootstrap says on an image with no curl, wget, python or package manager
NO_FETCH = (
    "cannot fetch corral's runtime: this machine has no curl, wget or python, and no package "
    "manager (apt-get, dnf, microdnf, yum, apk) to install curl with"
)


def bootstrap_argv(tmp: Path, env: dict[str, str] | None = None) -> list[str]:
    """A container's command: the real node bootstrap, its PATH without python (nor curl,
    wget or a package manager), ``env`` in its environment."""
    tmp.mkdir(parents=True, exist_ok=True)
    script = tmp / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    env = {"CORRAL_NODE_HOME": str(tmp / "node"), **(env or {})}
    assigned = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = f'{assigned} PATH={bare_bin(tmp)} exec /bin/bash {script} "$@"'
    return ["/bin/bash", "-c", command.strip(), "boot"]


def run_until_it_ends(
    run_id: str, name: str, provider: Provider, *, timeout: float = 60.0
) -> tuple[RunRecord, float]:
    """Tick a controller of ``provider`` (a provision timeout of 600 s) until the run ends;
    the run and the seconds it took."""
    store = Store.open()
    settings = Settings(provision_timeout_s=600, boot_log_check_s=0.3)
    controller = Controller(Context(store=store, providers={name: provider}, settings=settings))
    began = time.monotonic()

    def ended() -> RunRecord | None:
        controller.tick()
        run = store.get_run(run_id)
        return run if run.terminal else None

    run = wait_until(ended, timeout, 0.2, lambda: f"run {run_id} to end")
    return run, time.monotonic() - began
