"""Deliveries from the store's events to receivers on loopback: order, signatures, payloads."""

from __future__ import annotations

import json

import pytest
from hookkit import SECRET, FakeClock, hooked_run, simulate_run

from corral.notify.dispatcher import Dispatcher
from corral.notify.payloads import delivery_id
from corral.store import Store


def _dispatcher(store: Store, clock: FakeClock, **kw) -> Dispatcher:
    kw.setdefault("secret_resolver", {"HOOK_SECRET": SECRET}.get)
    return Dispatcher(store, clock=clock, **kw)


def test_events_reach_the_receiver_in_order_with_valid_signatures(store, clock, receivers):
    rx = receivers(secret=SECRET)
    run_id = hooked_run(store, {"url": rx.url, "secret": "HOOK_SECRET"})
    expected = simulate_run(store, run_id, clock)
    d = _dispatcher(store, clock)
    assert d.tick() == len(expected)
    assert d.run_pending() == len(expected)
    got = rx.accepted()
    assert [r.type for r in got] == expected
    assert all(r.signature_ok for r in got)
    assert all(r.path == "/hook/t0ken-in-path" for r in got)
    first = got[0]
    assert first.headers["user-agent"].startswith("corral-webhooks/")
    assert first.headers["content-type"] == "application/json"
    assert first.headers["x-corral-timestamp"] == str(int(clock()))
    assert first.headers["x-corral-attempt"] == "1"
    ids = [r.headers["x-corral-delivery"] for r in got]
    assert len(set(ids)) == len(ids) and ids == [r.json["id"] for r in got]
    body = got[-1].json
    assert body["type"] == "run.finished" and body["run"] == {"id": run_id, "name": "hooked"}
    assert body["data"] == {"state": "SUCCEEDED", "cost_usd": 0.25}
    assert body["attempt"] == 1 and body["reason"] == "run.finished happened"
    stage = got[1].json["data"]
    assert stage == {"stage": "train", "gpus": ["0"]}  # no pid: a fixed list of fields
    (cursor,) = store.webhook_cursors(run_id)
    assert cursor.delivered == len(expected) and cursor.failed == 0
    assert d.tick() == 0 and d.run_pending() == 0
    assert store.event_position("webhooks") == store.events()[-1].id


def test_a_tampered_body_or_another_secret_fails_verification(store, clock, receivers):
    wrong = receivers(secret="not-the-secret")
    run_id = hooked_run(store, {"url": wrong.url, "secret": "HOOK_SECRET"})
    store.add_event(run_id, "run.started", "go")
    d = _dispatcher(store, clock)
    d.tick()
    d.run_pending()
    assert [r.signature_ok for r in wrong.requests] == [False]


def test_each_webhook_gets_only_its_events_and_unsigned_without_a_secret(store, clock, receivers):
    signed, plain = receivers(secret=SECRET), receivers()
    run_id = hooked_run(
        store,
        {"url": signed.url, "secret": "HOOK_SECRET", "events": ["run.started", "run.finished"]},
        {"url": plain.url, "events": ["stage.finished"]},
    )
    simulate_run(store, run_id, clock)
    d = _dispatcher(store, clock)
    d.tick()
    d.run_pending()
    d.tick()
    assert signed.types() == ["run.started", "run.finished"]
    assert plain.types() == ["stage.finished"]
    assert plain.accepted()[0].signature_ok is None  # no X-Corral-Signature header
    # the filtered events are handled too: nothing is left to read after a restart
    assert store.event_position("webhooks") == store.events()[-1].id


def test_runs_without_webhooks_are_not_touched(store, clock, receivers):
    rx = receivers()
    plain = store.create_run(
        name="plain", spec={"name": "plain"}, spec_hash="h", spec_path="p", workdir="w"
    ).id
    hooked = hooked_run(store, {"url": rx.url})
    store.add_event(plain, "run.started", "plain")
    store.add_event(hooked, "run.started", "hooked")
    d = _dispatcher(store, clock)
    d.tick()
    d.run_pending()
    assert [r.json["run"]["id"] for r in rx.accepted()] == [hooked]
    assert store.webhook_cursors(plain) == []


def test_progress_is_sent_at_most_once_per_interval_with_cost_and_gpu_usage(
    store, clock, receivers
):
    rx = receivers()
    run_id = hooked_run(store, {"url": rx.url, "events": ["progress"], "progress_interval": 60})
    store.create_attempt(run_id, 1, provider="local", offer={}, price_per_hour=1.0)
    gpus = [
        {
            "id": "0",
            "utilization_pct": 97.0,
            "memory_used_mb": 30120,
            "memory_total_mb": 46068,
            "temperature_c": 70,
        }
    ]
    store.update_attempt(run_id, 1, data={"status": {"gpus": gpus, "stages": []}})
    store.update_run(run_id, attempt=1, cost_usd=1.75)
    for step, after in [(1, 0), (2, 10), (3, 30), (4, 21), (5, 4), (6, 70)]:
        clock.advance(after)  # progress at t = 0, 10, 40, 61, 65, 135
        store.add_event(
            run_id,
            "progress",
            f"step {step}",
            attempt=1,
            data={
                "stage": "train",
                "step": step,
                "total": 6,
                "percent": step * 100 / 6,
                "loss": 1.0 / step,
                "metrics": {"lr": 0.001},
                "agent_seq": step,
                **({"eta_s": 12.5, "steps_per_s": 0.4} if step == 4 else {}),
            },
        )
    d = _dispatcher(store, clock)
    d.tick()
    d.run_pending()
    sent = [r.json["data"] for r in rx.accepted()]
    assert [p["step"] for p in sent] == [1, 4, 6]
    assert sent[0] == {
        "stage": "train",
        "step": 1,
        "total": 6,
        "percent": 100 / 6,
        "loss": 1.0,
        "metrics": {"lr": 0.001},
        "cost_usd": 1.75,
        "gpus": [
            {"id": "0", "utilization_pct": 97.0, "memory_used_mb": 30120, "memory_total_mb": 46068}
        ],
    }
    assert "eta_s" not in sent[0]  # an agent that sent none (an older one): no key
    assert sent[1]["eta_s"] == 12.5  # the agent's ETA is carried (additive field)


def test_a_payload_never_carries_a_secret_or_environment_values(store, clock, receivers):
    rx = receivers(secret=SECRET)
    run_id = hooked_run(store, {"url": rx.url, "secret": "HOOK_SECRET"})
    store.add_event(run_id, "setup.started", "setup", data={"commands": ["export T=abc"]})
    store.add_event(
        run_id,
        "stage.started",
        f"stage started with {SECRET} in its reason",
        data={
            "stage": "train",
            "gpus": [],
            "env": {"HF_TOKEN": "hf_private"},
            "command": "TOKEN=hf_private python train.py",
        },
    )
    store.add_event(
        run_id,
        "checkpoint.saved",
        "ckpt",
        data={"stage": "train", "step": 3, "metrics": {SECRET: 1.0}},
    )
    d = _dispatcher(store, clock)
    d.tick()
    d.run_pending()
    got = rx.accepted()
    assert [r.type for r in got] == ["stage.started", "checkpoint.saved"]
    assert all(r.signature_ok for r in got)
    for r in got:
        text = r.body.decode()
        assert SECRET not in text and "hf_private" not in text and "HF_TOKEN" not in text
    assert "***" in got[0].json["reason"] and got[1].json["data"]["metrics"] == {"***": 1.0}


def test_a_missing_secret_is_one_clear_event_and_nothing_is_sent_unsigned(store, clock, receivers):
    rx = receivers()
    run_id = hooked_run(store, {"url": rx.url, "secret": "MISSING_SECRET"})
    simulate_run(store, run_id, clock)
    d = Dispatcher(store, clock=clock, secret_resolver=lambda name: None)
    d.tick()
    d.run_pending()
    assert rx.requests == []
    errors = store.events(run_id, types=["webhook.error"])
    assert len(errors) == 1
    assert "MISSING_SECRET is not set" in errors[0].reason
    assert "t0ken" not in errors[0].reason  # the URL's path is not shown
    assert store.webhook_cursors(run_id)[0].failed == 6


def test_a_secret_resolver_that_raises_does_not_stop_the_dispatcher(store, clock, receivers):
    rx = receivers()
    run_id = hooked_run(store, {"url": rx.url, "secret": "HOOK_SECRET"})
    store.add_event(run_id, "run.started", "go")

    def broken(name: str) -> str:
        raise RuntimeError("vault says: the value is hunter2")

    d = Dispatcher(store, clock=clock, secret_resolver=broken)
    d.tick()
    d.run_pending()
    (err,) = store.events(run_id, types=["webhook.error"])
    assert "hunter2" not in json.dumps(err.to_dict())


def test_delivery_ids_are_stable_for_a_run_webhook_and_event():
    assert delivery_id("r-1", 0, 7) == delivery_id("r-1", 0, 7)
    assert len({delivery_id("r-1", 0, 7), delivery_id("r-1", 1, 7), delivery_id("r-1", 0, 8)}) == 3


@pytest.mark.postgres
def test_a_run_is_delivered_in_order_from_a_postgres_store(postgres_url, clock, receivers):
    rx = receivers(secret=SECRET)
    with Store.open(postgres_url, clock=clock.dt) as pg:
        run_id = hooked_run(pg, {"url": rx.url, "secret": "HOOK_SECRET"})
        expected = simulate_run(pg, run_id, clock)
        d = _dispatcher(pg, clock)
        d.tick()
        d.run_pending()
        d.tick()
        assert rx.types() == expected and all(r.signature_ok for r in rx.accepted())
        assert pg.event_position("webhooks") == pg.events()[-1].id
