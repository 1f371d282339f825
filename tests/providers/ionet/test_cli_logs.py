"""`corral logs` of a run whose agent never came up shows the container's log from IO.net."""

from __future__ import annotations

import uuid

from typer.testing import CliRunner

from corral.cli.app import app
from corral.providers.base import Bootstrap, Requirements
from corral.store import Store
from support.waiting import wait_until

from ..contract import provider_plan
from .fake_server import API_KEY


def test_logs_of_a_run_whose_agent_never_came_up_show_the_container_log(
    make_provider, fake, tmp_path, monkeypatch
):
    from control.helpers import submit, write_spec

    for name, value in {
        **fake.env(),
        "IONET_API_KEY": API_KEY,
        "CORRAL_IONET_LOG_READ_S": "1",
        "CORRAL_IONET_RATE_PER_S": "none",
    }.items():
        monkeypatch.setenv(name, value)
    fake.log_hold_s = 3.0
    spec = write_spec(
        tmp_path,
        """
        name: noagent
        run: python train.py
        resources: {gpus: "H100:1", providers: [ionet]}
        """,
    )
    run_id = submit(spec)
    provider = make_provider()
    offer = provider.offers(Requirements(gpu_type="H100", gpu_count_min=1))[0]
    key = f"{run_id}-a1"
    plan = provider_plan(provider, offer, tmp_path, key, "python train.py")
    inst = provider.launch(offer, Bootstrap(plan=plan, token=uuid.uuid4().hex), key)
    dep = fake.deps[inst.instance_id]
    wait_until(lambda: dep.worker is not None, message="the container")
    dep.worker.container.kill()  # an image without corral: it says so and never serves
    dep.worker.container.argv = [
        "bash",
        "-c",
        "echo 'corral: the image has no python' >&2; sleep 30",
    ]
    dep.worker.container.start()
    store = Store.open()
    store.record_intent(run_id=run_id, attempt=1, provider="ionet", key=key)
    store.update_resource(
        key, state="active", instance_id=inst.instance_id, instance=inst.model_dump(mode="json")
    )

    def shown() -> str | None:
        result = CliRunner().invoke(app, ["logs", run_id])
        return result.output if "the image has no python" in result.output else None

    output = wait_until(shown, timeout=20, interval=0.5, message="the container's log")
    assert f"console log of ionet machine {inst.instance_id}" in output
    assert API_KEY not in output
    provider.terminate(inst)
