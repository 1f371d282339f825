"""The container clouds' fakes as a controller's environment sees them (end-to-end tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .ionet.fake_server import API_KEY as IONET_KEY
from .ionet.fake_server import FakeIonet
from .salad.fake_server import API_KEY as SALAD_KEY
from .salad.fake_server import FakeSalad

#: a GPU each fake sells, for a spec's resources.gpus
GPUS = {"salad": "RTX3090:1", "ionet": "H100:1"}


def start_fake(kind: str, root: Path) -> tuple[Any, dict[str, str]]:
    """The fake cloud and the environment that points a controller (and the CLI) at it."""
    if kind == "salad":
        fake: Any = FakeSalad(root)
        env = {
            **fake.env(),
            "SALAD_API_KEY": SALAD_KEY,
            "CORRAL_SALAD_LIST_CACHE_S": "0.3",
            "CORRAL_SALAD_INSTANCES_CACHE_S": "0.3",
        }
    else:
        fake = FakeIonet(root)
        env = {
            **fake.env(),
            "IONET_API_KEY": IONET_KEY,
            "CORRAL_IONET_LIST_CACHE_S": "0.3",
            "CORRAL_IONET_CONTAINERS_CACHE_S": "0.3",
            "CORRAL_IONET_RATE_PER_S": "none",
        }
    return fake, {**env, "CORRAL_PROVIDERS": kind}


def live(kind: str, fake: Any) -> list[str]:
    """What the fake still runs (and bills) for anyone: groups, or deployments not ended."""
    if kind == "salad":
        return list(fake.cloud.groups)
    return [d.id for d in fake.live() if d.status not in ("termination requested", "destroyed")]


def assert_contract_clean(fake: Any) -> None:
    """Fail when any exchange with a fake bound to its provider's published contract broke it
    (a fake without one passes)."""
    check = getattr(fake, "contract", None)
    if check is not None:
        check.assert_clean()
