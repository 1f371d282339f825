"""The RunPod provider under corral's controller: a spot run interrupted by RunPod is
recovered on a new pod and resumes from its checkpoint on the network volume; a controller
killed between "create the pod" and "record the pod" adopts that pod after a restart."""

from __future__ import annotations

import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.control.launching import attempt_key
from corral.providers.base import Requirements
from corral.providers.runpod.bootstrap import pod_name
from corral.store import Store
from support.waiting import wait_until

from .fake_server import API_KEY


def _controller(store: Store, provider) -> Controller:
    # intent_grace_s=0: the controller plays one restarted long after the crash
    return Controller(
        Context(store=store, providers={"runpod": provider}, settings=Settings(intent_grace_s=0))
    )


def test_a_pod_created_before_the_controller_died_is_adopted_not_created_again(
    make_provider, fake, tmp_path
):
    from control.helpers import submit, write_spec

    spec = write_spec(
        tmp_path,
        """
        name: adopt
        run: sleep 30
        resources: {gpus: "L40S:1", spot: false, providers: [runpod]}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    provider = make_provider()
    offer = next(
        o for o in provider.offers(Requirements(gpu_type="L40S", gpu_count_min=1, spot=False))
    )
    # what the dead controller had done: claimed the run, written the intent, and sent the
    # create, which RunPod carried out; the answer (and the controller) never came back
    store.transition(
        run_id,
        "PROVISIONING",
        "launching attempt 1",
        expect={"PENDING"},
        attempt=1,
        provider="runpod",
    )
    store.create_attempt(
        run_id,
        1,
        provider="runpod",
        offer=offer.model_dump(mode="json"),
        price_per_hour=offer.price_per_hour,
    )
    key = attempt_key(run_id, 1)
    store.record_intent(
        run_id=run_id,
        attempt=1,
        provider="runpod",
        key=key,
        data={"offer": offer.model_dump(mode="json")},
    )
    orphan = fake.cloud.create(
        name=pod_name(key),
        image="x",
        gpu_ids=[offer.details["gpu_type_id"]],
        count=1,
        cloud=offer.details["cloud_type"],
        interruptible=False,
        env={},
        ports=["8750/http"],
        argv=[],
    )
    _controller(store, provider).tick()
    [res] = store.resources(run_id=run_id, open_only=True)
    assert (res.state, res.instance_id) == ("active", orphan.id)
    assert fake.creates == [] and [p.id for p in fake.cloud.list()] == [orphan.id]
    store.request_action(run_id, "cancel")
    _controller(store, provider).tick()
    assert store.get_run(run_id).state == "CANCELLED"
    assert fake.cloud.list() == [] and store.resources(run_id=run_id, open_only=True) == []


@pytest.mark.slow
def test_an_interrupted_spot_run_resumes_on_a_new_pod_from_the_network_volume(
    make_provider, fake, tmp_path, corral_home, monkeypatch
):
    from control.helpers import start_controller, state_events, submit, wait_for, write_spec

    volume = make_provider().create_volume("ckpts", 20, "EU-RO-1")
    mount = tmp_path / "volume"
    env = {
        **{f"CORRAL_RUNPOD_{k.upper()}": v for k, v in fake.settings().items()},
        "CORRAL_RUNPOD_NETWORK_VOLUME_ID": volume["id"],
        "CORRAL_RUNPOD_VOLUME_MOUNT_PATH": str(mount),
        "CORRAL_RUNPOD_RATE_PER_S": "none",
        "CORRAL_PROVIDERS": "runpod",
        "RUNPOD_API_KEY": API_KEY,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = write_spec(
        tmp_path,
        """
        name: spotty
        resources: {gpus: "L40S:1", spot: true, providers: [runpod]}
        stages:
          - name: prep
            run: echo prepared >> "$CORRAL_CHECKPOINT_DIR/prep.txt"
          - name: train
            needs: [prep]
            run: |
              cd "$CORRAL_CHECKPOINT_DIR"
              echo "attempt $CORRAL_ATTEMPT" >> attempts.txt
              if [ "$CORRAL_ATTEMPT" = 1 ]; then
                echo step-40 > "$CORRAL_CHECKPOINT_DIR/latest"
                trap 'exit 75' TERM; sleep 60 & wait
              fi
              cat "$CORRAL_CHECKPOINT_DIR/latest" >> resumed.txt
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    proc = start_controller()
    try:
        # the pods share no file with this machine; the network volume holds the checkpoints
        checkpoints = fake.cloud.volume_dir(volume["id"]) / "corral" / run_id / "checkpoints"
        checkpoint = checkpoints / "latest"
        wait_until(checkpoint.exists, timeout=40, message="the first attempt's checkpoint")
        wait_until(
            lambda: "prep" in (store.get_run(run_id).completed_stages or []),
            message="the controller to see prep done",
        )
        [pod] = fake.cloud.list()
        fake.interrupt(pod.id, notice=3.0)
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=60)
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    states = state_events(store, run_id)
    assert states[:3] == ["PENDING", "PROVISIONING", "RUNNING"] and "RECOVERING" in states
    first, second = store.attempts(run_id)
    assert (first.provider, first.exit_reason, second.exit_reason) == (
        "runpod",
        "preempted",
        "succeeded",
    )
    assert (checkpoints / "attempts.txt").read_text() == "attempt 1\nattempt 2\n"
    assert (checkpoints / "prep.txt").read_text() == "prepared\n"  # not run again
    assert (checkpoints / "resumed.txt").read_text() == "step-40\n"  # from the network volume
    assert len(fake.creates) == 2 and fake.cloud.list() == []  # two pods, both gone
    assert store.resources(run_id=run_id, open_only=True) == []
    for path in [corral_home / "controller-test.log", *corral_home.glob("*.db")]:
        assert API_KEY.encode() not in path.read_bytes()
    routes = [s.route for s in fake.seen]
    assert "graphql:podRentInterruptable" in routes and "GET /v2/catalog/gpus" in routes
    assert not [r for r in routes if "/v1" in r]  # REST v1 is retired: never called
