"""IO.net's API key by corral's name or by the one IO.net's guide uses, in a documented order."""

from __future__ import annotations

import logging

import pytest

from corral.errors import AuthFailed
from corral.providers.ionet import IonetProvider, IonetSettings
from corral.secrets import SecretStore

from .fake_server import API_KEY


def _provider(fake, corral_home) -> IonetProvider:
    return IonetProvider(settings=IonetSettings(**fake.settings()), home=corral_home)


def test_iocloud_api_key_is_read_when_ionet_api_key_is_not_set(fake, corral_home, monkeypatch):
    monkeypatch.delenv("IONET_API_KEY", raising=False)
    monkeypatch.setenv("IOCLOUD_API_KEY", API_KEY)  # IO.net's guide's name
    provider = _provider(fake, corral_home)
    try:
        assert provider.api.hardware()
    finally:
        provider.close()


def test_ionet_api_key_wins_when_both_are_set_and_the_choice_is_logged_by_name(
    fake, corral_home, monkeypatch, caplog
):
    monkeypatch.setenv("IOCLOUD_API_KEY", API_KEY)
    monkeypatch.setenv("IONET_API_KEY", "io-other-key-0000000")
    with caplog.at_level(logging.INFO, logger="corral.providers"):
        provider = _provider(fake, corral_home)
    try:
        with pytest.raises(AuthFailed, match="HTTP 401"):  # the fake knows only API_KEY
            provider.api.hardware()
    finally:
        provider.close()
    said = [r.getMessage() for r in caplog.records if "both set" in r.getMessage()]
    assert said == ["IONET_API_KEY and IOCLOUD_API_KEY are both set: IONET_API_KEY is used"]
    assert API_KEY not in caplog.text and "io-other-key" not in caplog.text
    # corral's secret store counts as set too, name by name
    monkeypatch.delenv("IONET_API_KEY")
    SecretStore().set("IONET_API_KEY", API_KEY)
    monkeypatch.setenv("IOCLOUD_API_KEY", "io-stale-guide-key-000")
    provider = _provider(fake, corral_home)
    try:
        assert provider.api.hardware()
    finally:
        provider.close()


def test_no_key_at_all_names_both_variables(fake, corral_home, monkeypatch):
    monkeypatch.delenv("IONET_API_KEY", raising=False)
    monkeypatch.delenv("IOCLOUD_API_KEY", raising=False)
    with pytest.raises(AuthFailed, match=r"IONET_API_KEY.*IOCLOUD_API_KEY") as info:
        _provider(fake, corral_home)
    assert "\n" not in str(info.value)
