"""Test support: EC2 instances (moto's) played by this machine, each in a root of its own.

moto keeps EC2's books but boots nothing. :class:`LocalMachineRunner` plays the machines: when
the provider sees an instance ``running`` it calls :meth:`~LocalMachineRunner.boot` with the
instance's real user-data, and the runner runs that very script, as cloud-init would, under
``CORRAL_HOME/aws-machines/<instance id>/``: the node bootstrap, then
:mod:`corral.providers.aws.boot`, which starts the agent. What differs from a real machine is
said in the script's environment, which a real instance never sets:

* ``CORRAL_NODE_ROOT=<machine>/fs``: the machine's own disk; every path of the script and of
  the agent's plan (``/opt/corral``, the workdir the code is shipped to, checkpoints, the data
  mount, the bootstrap log) lives under it. Where this machine allows it the script runs in a
  mount namespace of its own that shows ``<machine>`` at ``/mnt``, so the root is ``/mnt/fs``
  on every machine and ``aws-machines/`` holds its own directory alone
  (:class:`~corral.providers.common.node.NodeView`); a machine that is gone
  (:meth:`~LocalMachineRunner.stop`, :meth:`~LocalMachineRunner.kill`) loses that disk;
* ``CORRAL_AGENT_BIND=127.0.0.1:0`` (loopback, a free port) and ``CORRAL_SHUTDOWN_COMMAND=""``
  (a test host never powers itself off);
* ``CORRAL_FAKE_GPUS``: the instance type's GPUs, as the agent would detect them;
* a fresh machine's environment (:mod:`corral.providers.common.node`) plus what the instance
  profile would give it: this process's ``AWS_*`` (moto's credentials and endpoint), and
  ``CORRAL_PYTHON`` (the image's python: this interpreter, with corral).

Nothing of the controller's files, home or environment reaches the machine: the code comes
through the agent's port or object storage, as on EC2.

The spot market side comes from a fake instance metadata service (tests'
``fake_imds.FakeImds``) at ``imds_url``: each agent polls ``<imds_url>/<instance id>/latest/...``
for notices, and :meth:`~LocalMachineRunner.spot_status` reads
``GET <imds_url>/_fake/<instance id>`` to answer what EC2's spot request would say
(``marked-for-termination`` once an interruption is scheduled) - moto creates no spot requests.

:class:`LocalAwsProvider` is the AWS provider with such a runner. A test registers it in place
of the real one for the controller it starts (another process, which inherits the
environment)::

    CORRAL_PROVIDER_PLUGINS=aws=corral.testing.aws:LocalAwsProvider
    CORRAL_TEST_AWS_IMDS=<fake IMDS url>
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from corral import paths
from corral.errors import NotYetTerminated
from corral.files import write_json_atomic
from corral.pricing import load_catalog
from corral.providers.aws.boot import state_dir
from corral.providers.aws.notices import ENV_IMDS_URL, ENV_NOTICE_INTERVAL
from corral.providers.aws.provider import AwsProvider
from corral.providers.aws.userdata import extract_payload
from corral.providers.common import process
from corral.providers.common.agent_files import agent_endpoint, stage_groups
from corral.providers.common.node import NodeView, node_root
from corral.wire.env import (
    ENV_AGENT_BIND,
    ENV_FAKE_GPUS,
    ENV_NODE_ROOT,
    ENV_SHUTDOWN_COMMAND,
)

#: base URL of the fake instance metadata service the machines' agents poll
ENV_TEST_IMDS = "CORRAL_TEST_AWS_IMDS"
MACHINE_FILE = "machine.json"
CONSOLE = "console.log"


class LocalMachineRunner:
    """Plays the EC2 machines of the tests on this machine (see the module doc)."""

    def __init__(
        self,
        home: Path | None = None,
        *,
        imds_url: str | None = None,
        notice_interval: float = 0.2,
        python: str = sys.executable,
    ) -> None:
        self.root = Path(home or paths.home()) / "aws-machines"
        self.imds_url = imds_url.rstrip("/") if imds_url else None
        self.notice_interval = notice_interval
        self.python = python

    @staticmethod
    def instance_profile() -> dict[str, str]:
        """What the machine's instance profile gives it: the AWS credentials and endpoint
        of this process (moto's), as the metadata service would hand them to the SDKs."""
        return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}

    def machines(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir() if d.is_dir())

    def booted(self, instance_id: str) -> bool:
        return (self.root / instance_id / "booted").exists()

    def _record(self, instance_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.root / instance_id / MACHINE_FILE).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def boot(self, instance_id: str, instance_type: str, user_data: str) -> None:
        """Run the instance's user-data (once), in the machine's own root."""
        if self.booted(instance_id):
            return
        payload = extract_payload(user_data)  # the key and root, to find the agent later
        machine = self.root / instance_id
        fs = node_root(machine)
        fs.mkdir(parents=True, exist_ok=True)
        node = NodeView(machine, hide=self.root)  # it sees no other machine
        for m in payload.mounts:  # named volumes: the job's paths reach them
            self._mount(m.volume_id, m.path)
        script = machine / "user-data.sh"
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(user_data)
        entry = load_catalog("aws", "ec2").entry(instance_type)
        count = entry.gpu_count if entry else 0
        env = {
            **node.env(),
            **self.instance_profile(),
            ENV_NODE_ROOT: node.root,
            ENV_AGENT_BIND: "127.0.0.1:0",
            ENV_SHUTDOWN_COMMAND: "",
            ENV_FAKE_GPUS: f"{entry.gpu_type if entry and count else 'GPU'}:{count}",
            "CORRAL_PYTHON": self.python,
        }
        if self.imds_url:
            env[ENV_IMDS_URL] = f"{self.imds_url}/{instance_id}"
            env[ENV_NOTICE_INTERVAL] = str(self.notice_interval)
        since = time.time()
        pid, create_time = process.spawn_detached(
            node.argv(["bash", str(script)]), str(fs), env, machine / CONSOLE
        )
        write_json_atomic(
            machine / MACHINE_FILE,
            {
                "key": payload.key,
                "root": payload.root,
                "boot_pid": pid,
                "boot_create_time": create_time,
                "since": since,
            },
        )
        (machine / "booted").touch()

    def _state(self, instance_id: str, rec: dict[str, Any]) -> Path:
        fs = node_root(self.root / instance_id)
        return fs / state_dir(rec["root"], rec["key"]).lstrip("/")

    def volume_dir(self, volume_id: str) -> Path:
        """Where a named EBS volume's files are (they outlive every machine)."""
        return self.root.parent / "aws-volumes" / volume_id

    def _mount(self, volume_id: str, path: str) -> None:
        """The machine mounts a named volume: ``path`` (in the temporary directory: a test's
        machine shares this machine's files) becomes a link to the volume's files. A path
        anywhere else is never touched."""
        target = self.volume_dir(volume_id)
        target.mkdir(parents=True, exist_ok=True)
        mount = Path(path)
        if not mount.is_relative_to(tempfile.gettempdir()):
            return
        if mount.is_symlink():
            mount.unlink()
        elif mount.exists():
            return
        mount.parent.mkdir(parents=True, exist_ok=True)
        mount.symlink_to(target, target_is_directory=True)

    def console(self, instance_id: str) -> str | None:
        """What the machine printed on its console (its user-data's own output), once it
        booted; None before (EC2's console output stands in then)."""
        if not self.booted(instance_id):
            return None
        try:
            return (self.root / instance_id / CONSOLE).read_text(errors="replace")
        except OSError:
            return ""

    def endpoint(self, instance_id: str) -> str | None:
        rec = self._record(instance_id) if self.booted(instance_id) else None
        return agent_endpoint(self._state(instance_id, rec)) if rec else None

    def _groups(self, instance_id: str, rec: dict[str, Any]) -> list[process.Group]:
        """The machine's processes: the user-data script, the agent, the agent's stages."""
        groups = [process.Group(rec["boot_pid"], rec["boot_create_time"], "user-data")]
        state = self._state(instance_id, rec)
        try:
            pid = int(json.loads((state / "agent.json").read_text())["pid"])
            groups.append(process.Group(pid, psutil.Process(pid).create_time(), "agent"))
        except (OSError, ValueError, KeyError, TypeError, psutil.Error):
            pass
        return groups + stage_groups(state)

    def spot_status(self, instance_id: str) -> str | None:
        """What EC2's spot request would say: ``marked-for-termination`` once the fake IMDS
        has an interruption scheduled for this instance."""
        if not self.imds_url:
            return None
        try:
            r = httpx.get(f"{self.imds_url}/_fake/{instance_id}", timeout=2, trust_env=False)
            state = r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return None
        return "marked-for-termination" if state.get("interruption") else None

    def _halt(self, instance_id: str, grace: float, timeout: float) -> None:
        rec = self._record(instance_id)
        if rec is None:
            return
        since = float(rec["since"])
        deadline = time.monotonic() + timeout
        while True:
            left = process.stop_groups(self._groups(instance_id, rec), since, grace)
            # the agent may have started a stage meanwhile: once more with what is listed now
            left += process.stop_groups(self._groups(instance_id, rec), since, 0.0)
            if not left:
                return
            if time.monotonic() > deadline:
                pids = ", ".join(str(p.pgid) for p in left[:5])
                raise NotYetTerminated(f"aws test machine {instance_id}: still alive ({pids})")
            time.sleep(0.1)

    def stop(self, instance_id: str, timeout: float = 10.0) -> None:
        """The machine is gone: every process of it stops, then its disk goes (idempotent)."""
        self._halt(instance_id, grace=2.0, timeout=timeout)
        NodeView(self.root / instance_id).erase()

    def kill(self, instance_id: str) -> None:
        """The machine is reclaimed: SIGKILL to all its processes now; its disk goes."""
        self._halt(instance_id, grace=0.0, timeout=10.0)
        NodeView(self.root / instance_id).erase()

    def stop_all(self) -> None:
        for instance_id in self.machines():
            try:
                self.stop(instance_id)
            except Exception:  # a teardown reaches every machine
                pass


class LocalAwsProvider(AwsProvider):
    """The AWS provider whose instances' agents run on this machine (see the module doc).
    ``machine_runner`` defaults to a :class:`LocalMachineRunner` on ``CORRAL_TEST_AWS_IMDS``."""

    def __init__(self, *args: Any, machine_runner: Any = None, **kw: Any) -> None:
        if machine_runner is None:
            machine_runner = LocalMachineRunner(imds_url=os.environ.get(ENV_TEST_IMDS) or None)
        super().__init__(*args, machine_runner=machine_runner, **kw)
