"""Secrets through the service: a round trip where listing never shows a value."""

from __future__ import annotations

import json

import pytest

from corral.errors import BadInput, NotFound
from corral.secrets import SecretStore
from corral.service.secrets import delete_secret, list_secrets, rotate_secrets, set_secret

VALUE = "hf_serviceSecretValue42"


def test_set_list_rotate_delete_round_trip_never_returns_a_value() -> None:
    saved = set_secret("HF_TOKEN", VALUE)
    assert saved.name == "HF_TOKEN" and saved.created_at == saved.updated_at
    set_secret("A_KEY", VALUE + "a")
    listed = list_secrets()
    assert [s.name for s in listed] == ["A_KEY", "HF_TOKEN"]
    assert VALUE not in json.dumps([s.to_json() for s in listed])
    assert all(set(s.to_json()) == {"name", "created_at", "updated_at"} for s in listed)
    rotated = rotate_secrets()
    assert (rotated.reencrypted, rotated.keys) == (2, 2)
    assert SecretStore().get("HF_TOKEN") == VALUE  # still readable after the rotation
    assert delete_secret("HF_TOKEN").to_json() == {"name": "HF_TOKEN", "deleted": True}
    assert [s.name for s in list_secrets()] == ["A_KEY"]


def test_a_bad_name_or_value_is_bad_input_without_echoing_it() -> None:
    with pytest.raises(BadInput, match="invalid secret name") as bad:
        set_secret("not-a-name", VALUE)
    assert "not-a-name" not in str(bad.value)
    with pytest.raises(BadInput, match="empty secret value"):
        set_secret("EMPTY", "")
    assert list_secrets() == []


def test_deleting_a_missing_secret_is_not_found() -> None:
    with pytest.raises(NotFound, match="no secret named NOPE"):
        delete_secret("NOPE")
