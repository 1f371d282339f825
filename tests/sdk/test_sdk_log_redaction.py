"""SDK warnings that quote an exception never print a secret value in play."""

from __future__ import annotations

import logging

import pytest

from corral.sdk.retrying import retry
from corral.sdk.trackers.base import CompositeTracker, Tracker

SECRET = "tok-7f3a9c2e51d84b06"


@pytest.fixture(autouse=True)
def secret_in_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no secret store of the developer's machine
    monkeypatch.setenv("MYSERVICE_API_TOKEN", SECRET)


def test_a_retry_warning_does_not_print_the_secret_in_the_error(caplog):
    calls = []

    @retry(attempts=2, sleep=lambda _: None)
    def fetch():
        calls.append(1)
        if len(calls) == 1:
            raise OSError(f"GET https://api.example/v1?token={SECRET} failed")
        return "ok"

    with caplog.at_level(logging.WARNING, logger="corral.sdk.retry"):
        assert fetch() == "ok"
    assert "retrying" in caplog.text and "***" in caplog.text
    assert SECRET not in caplog.text


class _Failing(Tracker):
    def log(self, metrics, step):
        raise RuntimeError(f"401 for key {SECRET}")

    def log_table(self, name, rows, step):
        raise RuntimeError(f"401 for key {SECRET}")


def test_a_failing_tracker_warning_does_not_print_the_secret(caplog):
    with caplog.at_level(logging.WARNING):
        CompositeTracker([_Failing()]).log({"loss": 1.0}, 1)
    assert "failed to log" in caplog.text and SECRET not in caplog.text


def test_a_tracker_that_cannot_start_is_reported_without_the_secret(caplog, monkeypatch):
    from corral.errors import BadInput
    from corral.sdk.trackers import factory

    def boom(raw):
        raise RuntimeError(f"login refused for {SECRET}")

    monkeypatch.setattr(factory, "build_tracker", boom)
    with caplog.at_level(logging.WARNING):
        factory.make_trackers([{"type": "wandb"}], strict=False)
    assert "left out" in caplog.text and SECRET not in caplog.text
    with pytest.raises(BadInput) as err:
        factory.make_trackers([{"type": "wandb"}], strict=True)
    assert SECRET not in str(err.value) and "***" in str(err.value)
