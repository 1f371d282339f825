"""What the tests of a controller process over stand-in runs share: the stand-in server (one
process answers for every machine and agent, ``corral.testing.standin``) and runs made as rows
(the controller launches them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.spec import load_spec_text, spec_hash
from corral.store import Store
from corral.testing.standin import Config, StandInServer


@pytest.fixture
def standin() -> Iterator[StandInServer]:
    srv = StandInServer(cfg=Config(boot_s=0.1, log_every_s=1.0, progress_every_s=3.0))
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()


def create_run(store: Store, name: str, body: str) -> str:
    """A PENDING run of ``name: <name>`` plus ``body`` (YAML), as the CLI would store it."""
    spec = load_spec_text(f"name: {name}\n{body}")
    return store.create_run(
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        spec_hash=spec_hash(spec),
        spec_path="corral.yaml",
        workdir="/tmp",
    ).id
