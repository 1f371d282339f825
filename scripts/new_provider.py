"""Scaffold a new container-cloud provider from corral's provider kit.

    python scripts/new_provider.py NAME [--root DIR]

writes, under the repository ``DIR`` (default: this one):

* ``src/corral/providers/NAME/``: a provider built on the kit, for a container cloud with a
  plain REST API (list offers, create a machine, list, read and delete machines): its
  settings (``CORRAL_NAME_*`` through :mod:`corral.providers.common.env_settings`, the API key
  through :mod:`corral.providers.common.credentials`), its API client
  (:class:`corral.providers.http.ProviderHTTP`), what a machine is created with (the one
  delivery format and the node bootstrap), its node's boot (the one boot path of
  :mod:`corral.agent.boot`) and the provider (create-or-adopt by launch key, a listing cache,
  :class:`corral.errors.MaybeLaunched` when a create's outcome is unknown);
* ``tests/providers/NAME/``: a fake of that API on loopback that runs each machine's command
  as a local "container" (the agent for real), its fixtures and the shared contract suite
  (``tests/providers/contract.py``) against it;
* the registry line in ``src/corral/providers/registry.py``.

The generated code runs and its contract suite passes as generated; what is left to the
provider's author is the cloud itself: its real paths and bodies in ``api.py`` and
``bootstrap.py``, its status words, and its published OpenAPI document in ``contracts/`` with
the fake bound to it (see ``docs/providers.md``, "A new provider"). The import-layering
checks (``scripts/lint_imports.py``) cover the new folder without any list being touched.
Nothing is overwritten: an existing folder or registry entry is an error.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parent.parent
NAME_RE = re.compile(r"^[a-z][a-z0-9]{1,23}$")
REGISTRY = "src/corral/providers/registry.py"
_REGISTRY_END = '    "pool": "corral.providers.pool:PoolProvider",\n'

INIT = '''"""$Title: a container cloud (``docs/providers.md``)."""

from corral.providers.$name.provider import ${Cls}Provider
from corral.providers.$name.settings import ${Cls}Settings

__all__ = ["${Cls}Provider", "${Cls}Settings"]
'''

SETTINGS = '''"""Settings of the $Title provider.

Every field can come from the environment (``CORRAL_${NAME}_<FIELD>``, upper case; lists comma
separated). The API key is a secret: ``${NAME}_API_KEY``, from corral's secret store or the
environment.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from corral.providers.common.env_settings import read_settings

ENV_PREFIX = "CORRAL_${NAME}_"
#: where the API key is looked for, in order
API_KEY_NAMES = ("${NAME}_API_KEY",)


class ${Cls}Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_url: str = Field(description="The API's base URL (CORRAL_${NAME}_API_URL).")
    image: str = Field(
        "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        description="Container image; it needs python 3.11+ (the node bootstrap installs corral).",
    )
    agent_port: int = Field(8750, ge=1, le=65535, description="The container port of the agent.")
    controller_timeout_s: float = Field(
        1800.0, gt=0, description="A machine whose job ended exits after this long alone."
    )
    rate_per_s: float | None = Field(
        2.0, gt=0, description="Most API requests per second (None: no limit)."
    )
    list_cache_s: float = Field(
        10.0, ge=0, description="How long one listing of the machines serves every run."
    )
    create_attempts: int = Field(3, ge=1, description="Creates tried for one launch.")

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> ${Cls}Settings:
        """Settings from ``CORRAL_${NAME}_*`` variables, then ``overrides``. A bad or missing
        value is a one-line :class:`~corral.errors.BadInput` naming the variable."""
        return read_settings(
            cls, environ, ENV_PREFIX, overrides, what="$name settings", nullable=("rate_per_s",)
        )
'''

API = '''"""$Title's API: offers and machines, through corral's HTTP client (retries, rate limit,
typed errors, secrets scrubbed).

    GET    /offers           [{"id", "gpu_type", "gpu_count", "price_per_hour", "available"}]
    POST   /machines         {"name", "offer_id", "image", "env", "command", "port"} -> machine
    GET    /machines         [machine]
    GET    /machines/{id}    machine (404: gone)
    DELETE /machines/{id}    (404: gone already)

a machine being ``{"id", "name", "status", "url"}``. Adapt the paths and bodies to the
cloud's published document (``contracts/``); a create is never repeated on a timeout or a
5xx (the provider looks the machine up by name).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from corral.errors import ProviderError
from corral.providers.http import ProviderHTTP, ResourceNotFound, RetryPolicy, TokenBucket

PROVIDER = "$name"


class Machine(BaseModel):
    """A machine as the API shows it (what corral reads of it; other keys are ignored)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    name: str
    status: str
    url: str | None = None


class ${Cls}API:
    def __init__(
        self,
        api_key: str,
        base_url: str,
        *,
        client: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        rate: float | None = None,
        bucket: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.http = ProviderHTTP(
            PROVIDER,
            base_url,
            client=client,
            token=api_key,
            retry=retry,
            rate=rate,
            bucket=bucket,
            sleep=sleep,
            clock=clock,
        )

    def close(self) -> None:
        self.http.close()

    def offers(self) -> list[dict[str, Any]]:
        body = self.http.get_json("/offers")
        if not isinstance(body, list):
            raise ProviderError("$name: GET /offers did not answer a list")
        return [o for o in body if isinstance(o, dict)]

    def create(self, body: dict[str, Any]) -> Machine:
        return Machine.model_validate(self.http.post_json("/machines", body, idempotent=False))

    def machines(self) -> list[Machine]:
        body = self.http.get_json("/machines")
        if not isinstance(body, list):
            raise ProviderError("$name: GET /machines did not answer a list")
        return [Machine.model_validate(m) for m in body]

    def machine(self, machine_id: str) -> Machine | None:
        try:
            return Machine.model_validate(self.http.get_json(f"/machines/{machine_id}"))
        except ResourceNotFound:
            return None

    def delete(self, machine_id: str) -> None:
        self.http.request("DELETE", f"/machines/{machine_id}", allow=(404,))
'''

BOOTSTRAP = '''"""What a $Title machine is created with: its name (the launch key's), its environment (the
boot blob in the one delivery format of :mod:`corral.agent.boot`, the node bootstrap's
install values) and its command (the node bootstrap, then this provider's boot).
"""

from __future__ import annotations

from typing import Any

from corral.providers.base import Bootstrap, NodeProfile, Offer
from corral.providers.common.boot_blob import boot_env
from corral.providers.common.wheel import bootstrap_script
from corral.providers.$name.settings import ${Cls}Settings

NAME_PREFIX = "corral-"
ENV_KEY = "CORRAL_${NAME}_LAUNCH_KEY"
#: where a machine keeps the runs' code
RUNS = "/corral/runs"
#: what the machine runs once corral is there
BOOT_ARGS = ("-m", "corral.providers.$name.boot", "agent")


def machine_name(key: str) -> str:
    """The machine's name carries the launch key: how a launch finds its machine again (if
    the cloud's names are DNS labels, use ``boot_blob.label_name`` and read the key back from
    a label or the environment instead)."""
    return NAME_PREFIX + key


def key_of(name: str) -> str | None:
    """The launch key of a machine corral named, else None."""
    return name[len(NAME_PREFIX) :] if name.startswith(NAME_PREFIX) else None


def node_profile(run_id: str, settings: ${Cls}Settings) -> NodeProfile:
    """The agent listens on every interface on the agent port; the code is shipped to
    ``/corral/runs/<run>/work``; the image may lack corral (the bootstrap installs it)."""
    return NodeProfile(
        host="::",
        port=settings.agent_port,
        controller_timeout_s=settings.controller_timeout_s,
        workdir=f"{RUNS}/{run_id}/work",
        install_corral=True,
    )


def create_body(
    offer: Offer, bootstrap: Bootstrap, key: str, settings: ${Cls}Settings
) -> dict[str, Any]:
    """``POST /machines`` for one attempt."""
    env = {**bootstrap.install, **boot_env(bootstrap), ENV_KEY: key}
    return {
        "name": machine_name(key),
        "offer_id": offer.offer_id,
        "image": bootstrap.image.name if bootstrap.image is not None else settings.image,
        "env": {k: v for k, v in env.items() if v},
        "command": ["bash", "-c", bootstrap_script(), "corral-boot", *BOOT_ARGS],
        "port": settings.agent_port,
    }
'''

BOOT = '''"""Runs inside a $Title machine: ``python -m corral.providers.$name.boot agent``.

The one boot path (:mod:`corral.agent.boot`) with this provider's hooks: the agent's files and
checkpoints on the container's own disk, the agent on ``[::]:<agent port>``, no shutdown
command (a machine cannot delete itself without the API key, which never reaches it: when no
controller calls any more the agent exits, and the controller or its leak sweep deletes the
machine).
"""

from __future__ import annotations

import sys

from corral.agent import boot

LAYOUT = boot.Layout(container_disk=True, bind_every_interface=True)


def main(argv: list[str] | None = None) -> int:
    return boot.node_main(
        argv, prog="corral.providers.$name.boot", layout=LAYOUT, shutdown_command=""
    )


if __name__ == "__main__":
    sys.exit(main())
'''

PROVIDER = '''"""$Title: machines of a container cloud running corral's agent.

A launch is one machine named for its launch key: ``launch`` looks the key up first (a retry,
a restarted controller) and creates the machine otherwise, adopting it when a create's answer
was lost (:func:`corral.providers.common.create.create_or_adopt`); one listing of the
account's machines serves every run's status for ``list_cache_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import httpx

from corral.errors import BadInput, ProviderError
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceState,
    InstanceStatus,
    NodeProfile,
    Offer,
    Provider,
    Requirements,
)
from corral.providers.common.create import create_or_adopt
from corral.providers.common.credentials import require_credential
from corral.providers.common.files import check_key
from corral.providers.common.gpu_names import matches
from corral.providers.common.listing_cache import ListingCache
from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.$name import bootstrap as boot
from corral.providers.$name.api import ${Cls}API, Machine
from corral.providers.$name.settings import API_KEY_NAMES, ${Cls}Settings

#: the API's status words, as corral reads them
STATES = {
    "pending": InstanceState.PROVISIONING,
    "running": InstanceState.RUNNING,
    "stopped": InstanceState.TERMINATED,
    "failed": InstanceState.FAILED,
    "deleted": InstanceState.TERMINATED,
}


class ${Cls}Provider(Provider):
    name: ClassVar[str] = "$name"
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsSpot": "$Title sells one tier of machines",
        "SupportsStop": "$Title machines cannot be stopped and started again, only deleted",
        "SupportsVolumes": "$Title machines have no persistent volumes; use checkpoints.storage",
        "SupportsPreemptionNotice": "$Title documents no interruption notice",
        "SupportsLogs": "corral does not read $Title's machine logs yet",
        "SupportsSimulatedPreemption": "$Title cannot be asked to fail a machine; simulate "
        "preemptions with the fake provider",
    }

    def __init__(
        self,
        api_key: str | None = None,
        *,
        settings: ${Cls}Settings | None = None,
        client: httpx.Client | None = None,
        home: Path | None = None,
        retry: RetryPolicy | None = None,
        bucket: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        key = require_credential(self.name, API_KEY_NAMES, api_key)
        self.settings = settings if settings is not None else ${Cls}Settings.from_env()
        self.api = ${Cls}API(
            key,
            self.settings.api_url,
            client=client,
            retry=retry,
            rate=self.settings.rate_per_s,
            bucket=bucket,
            sleep=sleep,
            clock=clock,
        )
        self._sleep = sleep
        #: one listing of the account's machines by id serves every run for list_cache_s
        self._machines: ListingCache[str, Machine] = ListingCache(
            lambda: {m.id: m for m in self.api.machines()},
            self.api.machine,
            self.settings.list_cache_s,
            clock,
        )

    def close(self) -> None:
        self.api.close()

    def offers(self, req: Requirements) -> list[Offer]:
        if req.providers is not None and self.name not in req.providers:
            return []
        out = []
        for o in self.api.offers():
            gpus = int(o.get("gpu_count") or 0)
            if gpus < req.gpu_count_min or (req.gpu_count_max and gpus > req.gpu_count_max):
                continue
            gpu_type = str(o.get("gpu_type") or "") or None
            if not matches([gpu_type or ""], req.gpu_type):
                continue
            price = float(o.get("price_per_hour") or 0.0)
            if req.max_hourly_price is not None and price > req.max_hourly_price:
                continue
            available = bool(o.get("available", True))
            out.append(
                Offer(
                    provider=self.name,
                    offer_id=str(o["id"]),
                    region=str(o.get("region") or "any"),
                    gpu_type=gpu_type,
                    gpu_count=gpus,
                    price_per_hour=price,
                    available=available,
                    availability="unknown" if available else "none",
                )
            )
        return sorted(out, key=lambda x: x.price_per_hour)

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        return boot.node_profile(run_id, self.settings)

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        check_key(key)
        if offer.provider != self.name:
            raise BadInput(f"offer of provider {offer.provider!r} given to the $name provider")
        found = self._lookup(key)
        if found is not None:  # launched before (a retry, a restarted controller)
            return self._instance(found, key, offer)
        body = boot.create_body(offer, bootstrap, key, self.settings)

        def create() -> Instance:
            machine = self.api.create(body)
            self._machines.touch(machine.id)
            return self._instance(machine, key, offer)

        def adopt() -> Instance | None:
            try:
                again = self._lookup(key)
            except ProviderError:
                return None
            return None if again is None else self._instance(again, key, offer)

        return create_or_adopt(
            f"machine {boot.machine_name(key)}",
            provider=self.name,
            key=key,
            attempts=self.settings.create_attempts,
            sleep=self._sleep,
            create=create,
            adopt=adopt,
        )

    def _lookup(self, key: str) -> Machine | None:
        """The live machine named for ``key`` (a fresh listing: a create must not miss it)."""
        name = boot.machine_name(key)
        _, machines = self._machines.listing(fresh=True)
        live = [m for m in machines.values() if m.name == name and not _state(m).gone]
        return live[0] if live else None

    def _instance(self, machine: Machine, key: str, offer: Offer) -> Instance:
        return Instance(
            provider=self.name,
            instance_id=machine.id,
            key=key,
            offer=offer,
            endpoint=machine.url,
        )

    def status(self, instance: Instance) -> InstanceStatus:
        machine = self._machines.get(instance.instance_id)
        if machine is None:
            return InstanceStatus(state=InstanceState.TERMINATED, detail="the machine is gone")
        state = _state(machine)
        endpoint = machine.url if state == InstanceState.RUNNING else None
        return InstanceStatus(state=state, detail=machine.status, endpoint=endpoint)

    def terminate(self, instance: Instance) -> None:
        self.api.delete(instance.instance_id)
        self._machines.touch(instance.instance_id)

    def find(self, key: str) -> Instance | None:
        check_key(key)
        machine = self._lookup(key)
        if machine is None:
            return None
        offer = Offer(provider=self.name, offer_id="unknown")
        return self._instance(machine, key, offer)

    def list_instances(self) -> list[Instance]:
        _, machines = self._machines.listing(fresh=True)
        out = []
        for m in machines.values():
            key = boot.key_of(m.name)
            if key is not None and not _state(m).gone:
                offer = Offer(provider=self.name, offer_id="unknown")
                out.append(self._instance(m, key, offer))
        return out


def _state(machine: Machine) -> InstanceState:
    return STATES.get(machine.status, InstanceState.UNKNOWN)
'''

TEST_INIT = '''"""Tests of the $Title provider, against a fake $Title on loopback."""
'''

FAKE = '''"""A fake $Title on loopback: the API of ``corral/providers/$name/api.py``, each machine's
command run as a local "container" (``support.containers``: the agent for real, on a port of
its own, in a root of its own).

Bind it to the cloud's published document once it is in ``contracts/``: set ``contract`` to a
``support.openapi_contract.ContractCheck`` of it, and every exchange is checked against it
(see ``tests/providers/ionet/fake_server.py``).
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

from support.containers import Container
from support.fakehttp import Fault, Faults, QuietHandler, send, start_server

API_KEY = "${name}-test-key"
OFFERS = [
    {"id": "gpu-1x", "gpu_type": "H100", "gpu_count": 1, "price_per_hour": 2.5, "available": True},
    {"id": "gpu-2x", "gpu_type": "H100", "gpu_count": 2, "price_per_hour": 5.0, "available": True},
]


class Fake${Cls}:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.machines: dict[str, dict[str, Any]] = {}
        self.containers: dict[str, Container] = {}
        self.creates: list[dict[str, Any]] = []
        self.faults: Faults[Fault] = Faults()
        self.server = start_server(self, QuietHandler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def settings(self) -> dict[str, Any]:
        return {"api_url": self.base_url, "rate_per_s": None}

    def close(self) -> None:
        for container in self.containers.values():
            container.kill()
        self.server.shutdown()
        self.server.server_close()

    def _view(self, machine_id: str) -> dict[str, Any]:
        m = dict(self.machines[machine_id])
        container = self.containers.get(machine_id)
        if m["status"] == "running" and container is not None and not container.running():
            m["status"] = "failed" if container.exit_code else "stopped"
        return m

    def handle(self, h: Any) -> None:
        if h.headers.get("Authorization") != f"Bearer {API_KEY}":
            return send(h, 401, {"error": "bad key"}, content_type="always")
        route = f"{h.command} {h.path.split('?')[0]}"
        fault = self.faults.take(route)
        if fault is not None and not fault.after:
            return send(h, fault.status, {"error": "fault"}, content_type="always")
        parts = h.path.split("?")[0].strip("/").split("/")
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"null") if length else None
        with self.lock:
            status, answer = self._route(h.command, parts, body)
        if fault is not None:
            status, answer = fault.status, {"error": "fault"}
        send(h, status, answer, content_type="always")

    def _route(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        if method == "GET" and parts == ["offers"]:
            return 200, OFFERS
        if method == "GET" and parts == ["machines"]:
            return 200, [self._view(i) for i in self.machines]
        if method == "POST" and parts == ["machines"]:
            return self._create(body)
        if len(parts) == 2 and parts[0] == "machines" and parts[1] in self.machines:
            if method == "GET":
                return 200, self._view(parts[1])
            if method == "DELETE":
                self.machines.pop(parts[1])
                container = self.containers.pop(parts[1], None)
                if container is not None:
                    container.stop(grace=2.0)
                return 204, None
        return 404, {"error": "not found"}

    def _create(self, body: Any) -> tuple[int, Any]:
        self.creates.append(body)
        machine_id = uuid.uuid4().hex[:12]
        container = Container(body["command"], body["env"], self.root / machine_id)
        container.start()
        self.containers[machine_id] = container
        self.machines[machine_id] = {
            "id": machine_id,
            "name": body["name"],
            "status": "running",
            "url": f"http://127.0.0.1:{container.port}",
        }
        return 201, self.machines[machine_id]
'''

CONFTEST = '''"""Fixtures: a fake $Title on loopback and $Title providers pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.$name import ${Cls}Provider, ${Cls}Settings
from support.fakehttp import Sleeps

from .fake_server import API_KEY, Fake${Cls}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Fake${Cls}]:
    server = Fake${Cls}(tmp_path / "$name")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def make_provider(
    fake: Fake${Cls}, corral_home: Path, sleeps: Sleeps
) -> Iterator[Callable[..., ${Cls}Provider]]:
    clients: list[httpx.Client] = []

    def make(*, api_key: str = API_KEY, **settings: object) -> ${Cls}Provider:
        clients.append(httpx.Client())
        return ${Cls}Provider(
            api_key,
            settings=${Cls}Settings(**{**fake.settings(), "list_cache_s": 0.2, **settings}),
            client=clients[-1],
            home=corral_home,
            retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, timeout=5.0),
            bucket=TokenBucket(1000.0, 1000.0),
            sleep=sleeps,
        )

    yield make
    for client in clients:
        client.close()
'''

TEST_CONTRACT = '''"""The provider contract against the fake $Title: machines whose command runs corral's agent
for real."""

from __future__ import annotations

import pytest

from corral.providers.base import Requirements

from ..contract import ProviderContract


class Test${Cls}Contract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider):
        return make_provider()

    @pytest.fixture
    def requirements(self) -> Requirements:
        return Requirements(gpu_type="H100", gpu_count_min=1, gpu_count_max=1)
'''

TEST_LAUNCH = '''"""$Title's launch: the machine's command boots corral's agent (the one boot path), and a
create whose answer is lost is adopted when the machine exists, a typed "maybe launched" when
none is listed yet."""

from __future__ import annotations

import httpx
import pytest

from corral.errors import MaybeLaunched
from corral.providers.base import Requirements

from support.fakehttp import Fault
from support.waiting import wait_until

from ..contract import new_key, trivial_plan


def _bootstrap(tmp_path, key):
    from corral.providers.base import Bootstrap

    return Bootstrap(plan=trivial_plan(tmp_path, key), token="t")


def test_a_machine_boots_the_agent_from_what_it_was_created_with(make_provider, fake, tmp_path):
    p = make_provider()
    offer = p.offers(Requirements(gpu_count_min=1, gpu_count_max=1))[0]
    key = new_key()
    inst = p.launch(offer, _bootstrap(tmp_path, key), key)
    [body] = fake.creates
    assert "t" not in body["env"].values()  # the token travels inside the boot blob only

    def healthy() -> bool:
        try:
            return httpx.get(f"{inst.endpoint}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=60, message="the agent to answer on the machine's endpoint")
    p.terminate(inst)


def test_a_create_answered_with_a_5xx_that_went_through_is_adopted(make_provider, fake, tmp_path):
    p = make_provider()
    offer = p.offers(Requirements(gpu_count_min=1, gpu_count_max=1))[0]
    key = new_key()
    fake.faults.add(Fault("POST /machines", 502, after=True))
    inst = p.launch(offer, _bootstrap(tmp_path, key), key)
    assert len(fake.creates) == 1 and list(fake.machines) == [inst.instance_id]


def test_a_create_failing_every_time_is_maybe_launched(make_provider, fake, tmp_path, sleeps):
    p = make_provider(create_attempts=2)
    offer = p.offers(Requirements(gpu_count_min=1, gpu_count_max=1))[0]
    key = new_key()
    fake.faults.add(Fault("POST /machines", 503, times=10))
    with pytest.raises(MaybeLaunched, match=r"could not create machine corral-.* in 2 tries"):
        p.launch(offer, _bootstrap(tmp_path, key), key)
    assert fake.machines == {} and sleeps.calls == [2.0]
'''


def render(text: str, name: str) -> str:
    cls = name.capitalize()
    return Template(text).substitute(name=name, Cls=cls, NAME=name.upper(), Title=cls)


def files(name: str) -> dict[str, str]:
    """What the scaffold writes, by path relative to the repository."""
    src = f"src/corral/providers/{name}"
    tests = f"tests/providers/{name}"
    templates = {
        f"{src}/__init__.py": INIT,
        f"{src}/settings.py": SETTINGS,
        f"{src}/api.py": API,
        f"{src}/bootstrap.py": BOOTSTRAP,
        f"{src}/boot.py": BOOT,
        f"{src}/provider.py": PROVIDER,
        f"{tests}/__init__.py": TEST_INIT,
        f"{tests}/fake_server.py": FAKE,
        f"{tests}/conftest.py": CONFTEST,
        f"{tests}/test_contract.py": TEST_CONTRACT,
        f"{tests}/test_launch.py": TEST_LAUNCH,
    }
    return {path: render(text, name) for path, text in templates.items()}


def scaffold(name: str, root: Path) -> list[Path]:
    """Write the new provider ``name`` under ``root``; the paths written (registry included).
    SystemExit with one line if ``name`` is no provider name or is taken."""
    if not NAME_RE.match(name):
        raise SystemExit(f"new_provider: {name!r} is not a provider name (a-z, 0-9, 2-24 long)")
    registry = root / REGISTRY
    text = registry.read_text()
    if f'"{name}":' in text or (root / f"src/corral/providers/{name}").exists():
        raise SystemExit(f"new_provider: provider {name!r} exists already")
    if _REGISTRY_END not in text:
        raise SystemExit(f"new_provider: {REGISTRY} has no provider list to add {name!r} to")
    written = []
    for rel, content in files(name).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    line = f'    "{name}": "corral.providers.{name}:{name.capitalize()}Provider",\n'
    registry.write_text(text.replace(_REGISTRY_END, _REGISTRY_END + line))
    return [*written, registry]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the provider's name (lower case letters and digits)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    written = scaffold(args.name, root)
    for path in written:
        print(path.relative_to(root))
    tidy(written[:-1], root)
    return 0


def tidy(paths: list[Path], root: Path) -> None:
    """Sort the new files' imports (their order depends on the provider's name) and format
    them with ruff, when it is installed."""
    ruff = shutil.which("ruff")
    if ruff is None:
        print("new_provider: ruff is not installed: run `ruff check --fix` on the new files")
        return
    names = [str(p) for p in paths]
    subprocess.run([ruff, "check", "--fix", "--select", "I", "-q", *names], cwd=root, check=False)
    subprocess.run([ruff, "format", "-q", *names], cwd=root, check=False)


if __name__ == "__main__":
    sys.exit(main())
