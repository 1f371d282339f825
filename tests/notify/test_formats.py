"""``format: salad-compatible``: the payloads receivers written for SaladCloud's job guides
parse (status, message, timestamp, data.gpu_usage, data.stage, data.progress_percent), signed
and delivered like corral's own, beside a corral-format webhook of the same run."""

from __future__ import annotations

import pytest
from hookkit import SECRET, FakeClock, hooked_run, simulate_run

from corral.notify.dispatcher import Dispatcher
from corral.spec import JobSpec
from corral.store import Store


def test_a_salad_compatible_webhook_gets_the_guides_shape_signed_beside_corrals(
    store: Store, clock: FakeClock, receivers
):
    salad_rx, corral_rx = receivers(secret=SECRET), receivers(secret=SECRET)
    run_id = hooked_run(
        store,
        {"url": salad_rx.url, "secret": "HOOK_SECRET", "format": "salad-compatible"},
        {"url": corral_rx.url, "secret": "HOOK_SECRET"},
    )
    store.create_attempt(run_id, 1, provider="salad", offer={}, price_per_hour=0.1)
    gpus = [{"id": "0", "utilization_pct": 97.0}, {"id": "1", "utilization_pct": 95.5}]
    store.update_attempt(run_id, 1, data={"status": {"gpus": gpus, "stages": []}})
    store.update_run(run_id, attempt=1, cost_usd=0.2)
    types = simulate_run(store, run_id, clock)
    d = Dispatcher(store, clock=clock, secret_resolver={"HOOK_SECRET": SECRET}.get)
    d.tick()
    d.run_pending()
    salad = salad_rx.accepted()
    assert all(r.signature_ok for r in salad)
    assert [r.json["data"]["event"] for r in salad] == types
    for r in salad:
        body = r.json
        assert set(body) == {"status", "message", "timestamp", "data"}
        assert isinstance(body["message"], str) and body["message"]
        assert isinstance(body["data"]["gpu_usage"], str)
        assert {"stage", "progress_percent"} <= set(body["data"])
    by_event = {r.json["data"]["event"]: r.json for r in salad}
    progress = by_event["progress"]
    assert progress["status"] == "progress"  # what the guides' receivers look for
    assert progress["data"]["gpu_usage"] == "97,95.5"
    assert (progress["data"]["stage"], progress["data"]["progress_percent"]) == ("train", 50.0)
    assert progress["message"] == "train: 50.0% (step 5/10), loss 1.5"
    assert progress["timestamp"].endswith("Z")
    finished = by_event["run.finished"]
    assert (finished["status"], finished["data"]["progress_percent"]) == ("completed", 100.0)
    assert finished["data"]["cost_usd"] == 0.25
    assert by_event["stage.started"]["data"]["gpu_usage"] == ""
    # the same run's corral-format webhook is unchanged
    assert [r.json["type"] for r in corral_rx.accepted()] == types
    assert corral_rx.accepted()[0].json["run"]["id"] == run_id
    # the delivery header (what receivers deduplicate on) is there in both formats
    assert salad[0].headers["x-corral-delivery"] == salad[0].json["data"]["delivery_id"]
    assert salad[0].json["data"]["delivery_id"] != corral_rx.accepted()[0].json["id"]


def test_an_unknown_format_is_a_clear_error_at_launch(tmp_path):
    from corral.errors import BadInput
    from corral.service.submit import submit_run

    spec = tmp_path / "corral.yaml"
    spec.write_text(
        "name: x\nrun: 'true'\nnotify:\n  webhooks:\n"
        "    - {url: 'https://h.example/x', format: mattermost}\n"
    )
    with pytest.raises(BadInput) as info:
        submit_run(spec, start_controller=False)
    assert str(info.value) == (
        "notify.webhooks[0].format: unknown format 'mattermost' (known: corral, salad-compatible, slack, discord, teams)"
    )
    assert Store.open().list_runs() == []  # nothing recorded
    with pytest.raises(Exception, match="format"):  # not even a format name
        JobSpec.model_validate(
            {
                "name": "x",
                "run": "true",
                "notify": {"webhooks": [{"url": "https://h/x", "format": "Bad Format!"}]},
            }
        )
