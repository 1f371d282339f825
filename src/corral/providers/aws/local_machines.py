"""TESTS ONLY: run the agent of each (moto) EC2 instance on this machine.

moto keeps EC2's books but boots nothing. :class:`LocalMachineRunner` plays the machines: when
the provider sees an instance ``running`` it calls :meth:`boot` with the instance's real
user-data; the runner takes the payload out of it (the same bytes a real instance would run),
moves the machine's paths (``/opt/corral/...``, the data mount) under
``CORRAL_HOME/aws-machines/<instance id>/fs/``, and starts the agent through a
:class:`~corral.providers.local.LocalProvider` of its own (fake GPUs of the instance type,
loopback only, no power-off command), so it is tracked and killed like a local instance.

The spot market side comes from a fake instance metadata service (tests'
``fake_imds.FakeImds``) at ``imds_url``: each agent polls ``<imds_url>/<instance id>/latest/...``
for notices, and :meth:`spot_status` reads ``GET <imds_url>/_fake/<instance id>`` to answer what
EC2's spot request would say (``marked-for-termination`` once an interruption is scheduled) -
moto creates no spot requests.

Everything is in files under the home, so the controller (another process, built from
``CORRAL_AWS_TEST_MACHINES=local`` and ``CORRAL_AWS_FAKE_IMDS``) and the test share the machines.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

from corral import paths
from corral.errors import NotYetTerminated
from corral.gpu import GpuInfo
from corral.pricing import load_catalog
from corral.providers.aws.userdata import extract_payload
from corral.providers.base import Bootstrap, Offer
from corral.providers.local import LocalProvider
from corral.wire.plan import AgentPlan

ENV_IMDS_URL = "CORRAL_IMDS_URL"
ENV_NOTICE_INTERVAL = "CORRAL_NOTICE_INTERVAL_S"


class LocalMachineRunner:
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

    def _local(self, instance_id: str, gpus: int = 0, gpu_type: str | None = None) -> LocalProvider:
        fake = [GpuInfo(index=i, id=str(i), name=gpu_type or "GPU", fake=True) for i in range(gpus)]
        return LocalProvider(
            home=self.root / instance_id, gpus=fake, price_per_hour=0.0, python=self.python
        )

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

        plan = AgentPlan.model_validate(payload.plan)
        plan = plan.model_copy(
            update={
                "host": "127.0.0.1",
                "port": 0,
                "shutdown_command": None,
                "state_dir": local(plan.state_dir),
                "checkpoint_dir": local(plan.checkpoint_dir),
                "workdir": local(plan.workdir),
            }
        )
        Path(plan.workdir).mkdir(parents=True, exist_ok=True)
        env = dict(payload.env)
        if self.imds_url:
            env[ENV_IMDS_URL] = f"{self.imds_url}/{instance_id}"
            env[ENV_NOTICE_INTERVAL] = str(self.notice_interval)
        entry = load_catalog("aws", "ec2").entry(instance_type)
        count = entry.gpu_count if entry else 0
        gpu_type = entry.gpu_type if entry else None
        offer = Offer(provider="local", offer_id="local", gpu_type=gpu_type, gpu_count=count)
        boot = Bootstrap(plan=plan.model_dump(mode="json"), token=payload.token, env=env)
        self._local(instance_id, count, gpu_type).launch(offer, boot, instance_id)
        (self.root / instance_id / "booted").touch()

    def endpoint(self, instance_id: str) -> str | None:
        if not self.booted(instance_id):
            return None
        inst = self._local(instance_id).find(instance_id)
        return inst.endpoint if inst else None

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
        local = self._local(instance_id)
        inst = local.find(instance_id)
        if inst is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                local.terminate(inst)
                return
            except NotYetTerminated:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def kill(self, instance_id: str) -> None:
        """The machine is reclaimed: SIGKILL to all its processes now."""
        local = self._local(instance_id)
        inst = local.find(instance_id)
        if inst is not None and inst.data.get("state") == "active":
            local.preempt(inst, grace=0.0)

    def stop_all(self) -> None:
        for instance_id in self.machines():
            try:
                self.stop(instance_id)
            except Exception:  # a teardown reaches every machine
                pass
