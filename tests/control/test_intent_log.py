"""The intent log: a controller that dies around a provider call never leaks or doubles a
machine. These tests stop the controller at each dangerous point by hand."""

from __future__ import annotations

from pathlib import Path

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.control.launching import attempt_key
from corral.errors import MaybeLaunched
from corral.providers.base import Requirements
from corral.providers.local.provider import LocalProvider
from corral.store import Store

from .helpers import submit, write_spec


class CountingProvider(LocalProvider):
    launches: list[str]

    def launch(self, offer, bootstrap, key):  # type: ignore[override]
        self.launches.append(key)
        return super().launch(offer, bootstrap, key)


def _setup(tmp_path: Path) -> tuple[Store, CountingProvider, Controller, str]:
    spec = write_spec(
        tmp_path,
        """
        name: intent
        run: sleep 30
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    provider = CountingProvider(gpus=[])
    provider.launches = []
    # intent_grace_s=0: these tests play the part of a controller restarted long after the crash
    ctx = Context(store=store, providers={"local": provider}, settings=Settings(intent_grace_s=0))
    return store, provider, Controller(ctx), run_id


def _claim_with_intent(store: Store, provider: CountingProvider, run_id: str) -> str:
    """Claim attempt 1 of the run and write its intent row, as a launching process does just
    before it calls the provider. Returns the launch key."""
    offer = provider.offers(Requirements())[0].model_dump(mode="json")
    store.transition(
        run_id,
        "PROVISIONING",
        "launching attempt 1",
        expect={"PENDING"},
        attempt=1,
        provider="local",
    )
    store.create_attempt(run_id, 1, provider="local", offer=offer, price_per_hour=0.0)
    key = attempt_key(run_id, 1)
    store.record_intent(run_id=run_id, attempt=1, provider="local", key=key, data={"offer": offer})
    return key


def test_crash_after_intent_before_launch_launches_once_on_restart(tmp_path: Path) -> None:
    store, provider, controller, run_id = _setup(tmp_path)
    # what a controller had done when it died: claimed the run, wrote the intent, no call yet
    key = _claim_with_intent(store, provider, run_id)
    controller.tick()  # the restarted controller
    assert provider.launches == [key]
    res = store.resources(run_id=run_id, open_only=True)
    assert [r.state for r in res] == ["active"]
    assert len(list((provider.home / "local" / "instances").iterdir())) == 1


def test_crash_after_launch_before_record_reuses_the_same_instance(tmp_path: Path) -> None:
    store, provider, controller, run_id = _setup(tmp_path)
    controller.tick()  # claims and launches attempt 1
    [res] = store.resources(run_id=run_id, open_only=True)
    first_instance = res.instance_id
    # pretend the controller died after the provider call but before recording the result
    store.update_resource(res.key, state="intent")
    controller.tick()
    assert provider.launches == [res.key, res.key]  # same key: idempotent on the provider side
    [res2] = store.resources(run_id=run_id, open_only=True)
    assert res2.state == "active" and res2.instance_id == first_instance
    assert len(list((provider.home / "local" / "instances").iterdir())) == 1


def test_cancelled_run_leaves_no_instance_and_no_open_resource(tmp_path: Path) -> None:
    store, provider, controller, run_id = _setup(tmp_path)
    controller.tick()
    store.request_action(run_id, "cancel")
    controller.tick()
    run = store.get_run(run_id)
    assert run.state == "CANCELLED"
    assert store.resources(run_id=run_id, open_only=True) == []
    assert provider.list_instances() == []  # nothing left running
    [res] = store.resources(run_id=run_id)
    assert res.state == "gone"


def test_a_young_intent_is_left_to_the_process_that_is_launching_it(tmp_path: Path) -> None:
    """The CLI launches first attempts itself: while its intent is young, a controller neither
    launches it a second time nor closes it (a cancel waits until the launch is recorded)."""
    store, provider, controller, run_id = _setup(tmp_path)
    controller.ctx.settings.intent_grace_s = 3600
    _claim_with_intent(store, provider, run_id)
    controller.tick()
    assert provider.launches == []  # not launched twice
    store.request_action(run_id, "cancel")
    controller.tick()
    [res] = store.resources(run_id=run_id)
    assert res.state == "intent"  # not closed while the launch may be in flight
    assert store.get_run(run_id).state == "STOPPING"


class LostAnswerProvider(CountingProvider):
    """Its first create goes through but the answer is lost (MaybeLaunched)."""

    def launch(self, offer, bootstrap, key):  # type: ignore[override]
        instance = super().launch(offer, bootstrap, key)
        if len(self.launches) == 1:
            raise MaybeLaunched(f"local: no answer to the create of {key}")
        return instance


def test_a_launch_whose_outcome_is_unknown_keeps_its_key_and_adopts_the_machine(
    tmp_path: Path,
) -> None:
    store, _, controller, run_id = _setup(tmp_path)
    provider = LostAnswerProvider(gpus=[])
    provider.launches = []
    controller.ctx.providers["local"] = provider
    controller.tick()
    [res] = store.resources(run_id=run_id, open_only=True)
    assert res.state == "intent"  # not abandoned: the machine may exist and bill
    events = [e.reason for e in store.events(run_id, types=["provider.error"])]
    assert events == [f"local: no answer to the create of {res.key} (will retry the same key)"]
    controller.tick()  # the same key again: the provider finds the machine it made
    assert provider.launches == [res.key, res.key]
    [again] = store.resources(run_id=run_id, open_only=True)
    assert again.key == res.key and again.state == "active"
    assert len(list((provider.home / "local" / "instances").iterdir())) == 1
