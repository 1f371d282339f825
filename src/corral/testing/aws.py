"""Test support: EC2 instances (moto's) whose agents run on this machine.

moto keeps EC2's books but boots nothing. :class:`LocalMachineRunner` plays the machines: when
the provider sees an instance ``running`` it calls :meth:`~LocalMachineRunner.boot` with the
instance's real user-data; the runner takes the payload out of it (the same bytes a real
instance would run) and starts the agent with the plan exactly as the controller built it, on
an :class:`~corral.providers.common.host.AgentHost` of its own (fake GPUs of the instance
type) under ``CORRAL_HOME/aws-machines/<instance id>/``. What differs from a real machine is
said with ``corral agent`` launch options, as any node would: loopback with a free port, no
power-off command, and the machine's paths (the data mount) moved under ``fs/``.

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

import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from corral import paths
from corral.errors import NotYetTerminated
from corral.pricing import load_catalog
from corral.providers.aws.notices import ENV_IMDS_URL, ENV_NOTICE_INTERVAL
from corral.providers.aws.provider import AwsProvider
from corral.providers.aws.userdata import extract_payload
from corral.providers.base import Bootstrap, Offer
from corral.providers.common.host import AgentHost

#: base URL of the fake instance metadata service the machines' agents poll
ENV_TEST_IMDS = "CORRAL_TEST_AWS_IMDS"


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

    def _host(self, instance_id: str) -> AgentHost:
        return AgentHost(self.root / instance_id, self.python, label="aws test machine")

    def machines(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir() if d.is_dir())

    def booted(self, instance_id: str) -> bool:
        return (self.root / instance_id / "booted").exists()

    def boot(self, instance_id: str, instance_type: str, user_data: str) -> None:
        """Start the instance's agent (once)."""
        if self.booted(instance_id):
            return
        payload = extract_payload(user_data)
        fs = self.root / instance_id / "fs"
        moved = [p for p in (payload.root, payload.data_mount) if p]

        def local(path: str) -> str:
            for prefix in moved:
                if path == prefix or path.startswith(prefix + "/"):
                    return str(fs) + path
            return path

        plan = payload.plan
        Path(plan.workdir).mkdir(parents=True, exist_ok=True)
        env = dict(payload.env)
        if self.imds_url:
            env[ENV_IMDS_URL] = f"{self.imds_url}/{instance_id}"
            env[ENV_NOTICE_INTERVAL] = str(self.notice_interval)
        entry = load_catalog("aws", "ec2").entry(instance_type)
        count = entry.gpu_count if entry else 0
        gpu_type = entry.gpu_type if entry else None
        offer = Offer(provider="aws", offer_id=instance_type, gpu_type=gpu_type, gpu_count=count)
        launch = ["--bind", "127.0.0.1:0", "--shutdown-command", ""]
        launch += ["--checkpoint-dir", local(plan.checkpoint_dir)]
        self._host(instance_id).launch(
            instance_id,
            Bootstrap(plan=plan, token=payload.token, env=env),
            offer=offer,
            choose_gpus=lambda _held: [str(i) for i in range(count)],
            gpu_type=gpu_type if count else None,
            launch_args=launch,
        )
        (self.root / instance_id / "booted").touch()

    def endpoint(self, instance_id: str) -> str | None:
        if not self.booted(instance_id):
            return None
        host = self._host(instance_id)
        rec = host.record(instance_id)
        return host.endpoint(rec) if rec else None

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

    def stop(self, instance_id: str, timeout: float = 10.0) -> None:
        """The machine is gone: every process of it stops (idempotent)."""
        if not (self.root / instance_id).is_dir():
            return
        host = self._host(instance_id)
        rec = host.record(instance_id)
        if rec is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                host.terminate(rec)
                return
            except NotYetTerminated:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def kill(self, instance_id: str) -> None:
        """The machine is reclaimed: SIGKILL to all its processes now."""
        host = self._host(instance_id)
        rec = host.record(instance_id)
        if rec is not None and rec.state == "active":
            host.preempt(rec.key, rec.instance_id, grace=0.0)

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
