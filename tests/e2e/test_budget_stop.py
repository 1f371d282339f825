"""A budget stop ends gracefully: the job checkpoints on SIGTERM, the checkpoint reaches object
storage before the machine goes, and the final cost lands on the cap."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from control.helpers import submit, write_spec
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.providers.local.provider import LocalProvider
from corral.sdk import Checkpointer
from corral.store import Store

pytestmark = pytest.mark.slow
TRAINER = Path(__file__).with_name("trainer.py")
PRICE = 3600.0  # $1 a second: a tick is worth $0.10


def test_budget_stop_leaves_a_complete_checkpoint_in_storage(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    spec = write_spec(
        tmp_path,
        f"""
        name: capped
        budget: {{max_cost_usd: 5.0}}
        checkpoints: {{storage: "file://{bucket}"}}
        run: {sys.executable} {TRAINER} --total 1000 --step-seconds 0.05 --every 20
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    settings = Settings(tick_seconds=0.1, budget_stop_estimate_s=1.0)
    controller = Controller(
        Context(
            store=store, providers={"local": LocalProvider(price_per_hour=PRICE)}, settings=settings
        )
    )
    import time

    deadline = time.monotonic() + 60
    while not store.get_run(run_id).terminal and time.monotonic() < deadline:
        controller.tick()
        time.sleep(settings.tick_seconds)
    run = store.get_run(run_id)
    assert run.state == "STOPPED" and run.reason == "budget"
    # the newest checkpoint of the job (the one it saved on SIGTERM) reached storage complete
    # and verified before the machine went away
    from corral import paths

    local = Checkpointer(str(paths.run_dir(run_id) / "checkpoints")).latest()
    remote = Checkpointer(str(bucket / run_id))
    latest = remote.latest()
    assert local is not None and latest is not None and latest.step == local.step
    assert remote.restore()["step"] == latest.step
    uploads = store.events(run_id, types=["checkpoint.uploaded"])
    assert latest.step in {u.data["step"] for u in uploads}  # uploaded newest first
    # the cost lands near the cap: at most the stop estimate's error above it at $1/s, and
    # below it by at most the reserve the watcher keeps (the stop time plus the gap between
    # two of its checks, which a loaded machine makes longer)
    assert 3.0 <= run.cost_usd <= 6.0, run.cost_usd
