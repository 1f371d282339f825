"""The views' JSON is what `corral ... --json` printed before the service existed."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from corral.service.details import details
from corral.service.run_view import RunView
from corral.store import Store

from .helpers import record_run


def _legacy_run_json(store: Store, run_id: str) -> dict:
    """The run as cli/output.run_dict showed it: the record minus spec and lease, plus
    duration_s (None: the run never started)."""
    d = store.get_run(run_id).to_dict()
    for key in ("spec", "lease_owner", "lease_expires_at"):
        d.pop(key)
    d["duration_s"] = None
    return d


def test_a_run_view_is_the_record_without_spec_and_lease_in_the_same_order() -> None:
    store = Store.open()
    run_id = record_run(store)
    view = RunView.of(store.get_run(run_id))
    legacy = _legacy_run_json(store, run_id)
    assert json.dumps(view.to_json()) == json.dumps(legacy)  # same keys, order and formats
    assert view.to_json()["created_at"].endswith("+00:00")


def test_details_leave_out_the_checkpoint_dir_of_a_run_without_a_spec() -> None:
    store = Store.open()
    with_spec = details(store, store.get_run(record_run(store)))
    assert with_spec.to_json()["checkpoint_dir"] == with_spec.checkpoint_dir
    assert with_spec.checkpoint_dir
    bare = details(store, store.get_run(record_run(store, spec={})))
    doc = bare.to_json()
    assert "checkpoint_dir" not in doc
    assert list(doc)[-6:] == ["attempts", "stages", "acceptance", "manifest",
                              "checkpoint_sync", "logs_dir"]  # fmt: skip


def test_views_refuse_unknown_fields() -> None:
    store = Store.open()
    run = store.get_run(record_run(store))
    fields = RunView.fields_of(run)
    with pytest.raises(TypeError, match="spec"):
        RunView(**fields, spec={})
    doc = details(store, run).model_dump()
    with pytest.raises(ValidationError, match="extra"):
        type(details(store, run))(**doc, spec={})


def test_the_listed_run_and_the_detailed_run_show_the_run_alike() -> None:
    store = Store.open()
    run = store.get_run(record_run(store))
    listed = RunView.of(run).to_json()
    detailed = details(store, run).to_json()
    assert {k: detailed[k] for k in listed if k != "duration_s"} == {
        k: v for k, v in listed.items() if k != "duration_s"
    }


def test_details_carry_the_last_checkpoint_with_its_shards_once_the_job_reported_one() -> None:
    store = Store.open()
    run_id = record_run(store)
    store.create_attempt(run_id, 1, provider="local", offer={}, price_per_hour=0.0)
    store.update_run(run_id, attempt=1)
    assert "last_checkpoint" not in details(store, store.get_run(run_id)).to_json()
    last = {"stage": "train", "step": 1200, "path": "/ck/ckpt-1200", "ts": 1.0, "shards": 4}
    sync = {"last_uploaded_step": 1000}
    store.update_attempt(run_id, 1, data={"status": {"last_checkpoint": last,
                                                      "checkpoint_sync": sync}})  # fmt: skip
    shown = details(store, store.get_run(run_id))
    assert shown.to_json()["last_checkpoint"] == last

    from corral.cli.status import checkpoint_line

    assert checkpoint_line(shown.last_checkpoint, shown.checkpoint_sync) == (
        "  checkpoint  step 1200 (4 shards) · uploaded step 1000"
    )
    assert checkpoint_line({"step": 5, "shards": 1}, None) == "  checkpoint  step 5"
    assert checkpoint_line(None, None) is None
