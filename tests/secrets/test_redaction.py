"""Redaction: every secret value in play is *** in text, data, logs, events and webhooks."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from urllib.parse import quote

import pytest

from corral.secrets import (
    MASK,
    RedactingFilter,
    Redactor,
    SecretStore,
    current_redactor,
    install_log_redaction,
    redact,
    register_names,
    register_values,
    resolve,
)
from corral.secrets.redact import env_credentials, is_credential_name

STORED = "stored-secret-value-1"
RUNPOD = "rp_key_ABCDEFGH123"


def test_redactor_replaces_every_occurrence_and_longest_first():
    r = Redactor(["abcdef", "abcdefghij"])
    assert r.redact("x abcdefghij y abcdef z") == f"x {MASK} y {MASK} z"
    assert r.redact("nothing here") == "nothing here"


def test_values_shorter_than_six_characters_are_not_redacted():
    r = Redactor(["12345", "pass12"])
    assert r.redact("12345 pass12") == f"12345 {MASK}"
    assert not Redactor(["short"])


def test_json_escaped_and_url_encoded_forms_are_redacted_too():
    value = 'p@ss "word"/x y'
    r = Redactor([value])
    doc = json.dumps({"v": value})
    assert value not in r.redact(doc) and MASK in r.redact(doc)
    url = "https://h/?k=" + quote(value, safe="")
    assert MASK in r.redact(url) and quote(value, safe="") not in r.redact(url)


def test_redact_data_walks_dicts_lists_and_keys():
    r = Redactor([STORED])
    data = {
        "a": STORED,
        STORED: 1,
        "b": [f"x{STORED}x", {"c": (STORED, 3)}],
        "n": 4.5,
        "none": None,
    }
    out = r.redact_data(data)
    assert STORED not in json.dumps(out)
    assert out == {
        "a": MASK,
        MASK: 1,
        "b": [f"x{MASK}x", {"c": [MASK, 3]}],
        "n": 4.5,
        "none": None,
    }


def test_credential_names_in_the_environment_are_found():
    env = {
        "RUNPOD_API_KEY": RUNPOD,
        "AWS_SECRET_ACCESS_KEY": "aws-secret-123",
        "MY_SERVICE_PASSWORD": "pw-123456",
        "HF_TOKEN": "hf_abc123",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": "/usr/bin",
        "EMPTY_TOKEN": "",
    }
    assert set(env_credentials(env)) == {
        "RUNPOD_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "MY_SERVICE_PASSWORD",
        "HF_TOKEN",
    }
    assert not is_credential_name("CORRAL_HOME")


def test_current_redactor_knows_store_values_env_credentials_and_registered_ones(monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", RUNPOD)
    monkeypatch.setenv("PLAIN_NAMED_THING", "env-secret-by-name")
    SecretStore().set("STORED_ONE", STORED)
    register_values(["registered-value-9"])
    register_names(["PLAIN_NAMED_THING"])
    text = f"{STORED} {RUNPOD} env-secret-by-name registered-value-9 keep-me"
    assert redact(text) == f"{MASK} {MASK} {MASK} {MASK} keep-me"


def test_current_redactor_follows_changes_made_by_another_store_object(monkeypatch):
    assert redact(STORED) == STORED
    SecretStore().set("LATE_ONE", STORED)  # as another process would
    assert redact(STORED) == MASK
    SecretStore().delete("LATE_ONE")
    assert redact(STORED) == STORED
    monkeypatch.setenv("SALAD_API_KEY", "salad-key-0001")
    assert redact("salad-key-0001") == MASK


def test_current_redactor_is_cached_until_something_changes():
    SecretStore().set("CACHED_ONE", STORED)
    first = current_redactor()
    assert current_redactor() is first
    register_values(["another-value"])
    assert current_redactor() is not first


def test_resolve_registers_environment_values_for_redaction(monkeypatch):
    monkeypatch.setenv("UNREMARKABLE_NAME", "resolved-from-env")
    assert redact("resolved-from-env") == "resolved-from-env"
    assert resolve("UNREMARKABLE_NAME") == "resolved-from-env"
    assert redact("resolved-from-env") == MASK


def test_an_unreadable_store_keeps_redacting_what_it_knew(corral_home):
    SecretStore().set("KNOWN_ONE", STORED)
    assert redact(STORED) == MASK
    (corral_home / "secret.key").unlink()  # the key is gone: the values cannot be read again
    SecretStore().set("KNOWN_TWO", "second-stored-value")  # writes a new key, KNOWN_ONE unreadable
    assert redact(STORED) == MASK


def test_log_filter_redacts_messages_args_and_tracebacks(caplog):
    SecretStore().set("LOGGED_ONE", STORED)
    logger = logging.getLogger("corral.test.redact")
    handler = logging.Handler()
    seen: list[str] = []
    handler.emit = lambda record: seen.append(  # type: ignore[method-assign]
        logging.Formatter("%(message)s").format(record)
    )
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    try:
        logger.warning("token is %s", STORED)
        try:
            raise RuntimeError(f"failed with {STORED}")
        except RuntimeError:
            logger.exception("boom")
    finally:
        logger.removeHandler(handler)
    assert seen and all(STORED not in line for line in seen)
    assert f"token is {MASK}" in seen[0] and f"failed with {MASK}" in seen[1]


def test_install_log_redaction_covers_every_logger_and_later_handlers(capsys):
    SecretStore().set("LOGGED_TWO", STORED)
    old_factory = logging.getLogRecordFactory()
    try:
        install_log_redaction()
        install_log_redaction()  # idempotent
        logger = logging.getLogger("some.library")
        handler = logging.StreamHandler()  # added after the install
        logger.addHandler(handler)
        try:
            logger.error("a library says %s", STORED)
        finally:
            logger.removeHandler(handler)
    finally:
        logging.setLogRecordFactory(old_factory)
    err = capsys.readouterr().err
    assert f"a library says {MASK}" in err and STORED not in err


def test_install_log_redaction_adds_one_filter_per_handler():
    handler = logging.StreamHandler()
    old_factory = logging.getLogRecordFactory()
    try:
        install_log_redaction(handler)
        install_log_redaction(handler)
    finally:
        logging.setLogRecordFactory(old_factory)
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1


def test_events_written_by_the_store_hold_no_secret_value():
    from corral.store import Store

    SecretStore().set("EVENT_SECRET", STORED)
    store = Store.open()
    run = store.create_run(name="r", spec={"name": "r"}, spec_hash="h", spec_path="/x", workdir="/")
    store.add_event(run.id, "note", f"reason with {STORED}", data={"cmd": [f"--key={STORED}"]})
    store.create_attempt(run.id, 1, provider="local", offer={}, price_per_hour=0.0)
    store.append_agent_events(
        run.id,
        1,
        [{"type": "stage.finished", "reason": STORED, "data": {STORED: STORED}}],
        cursor=1,
    )
    events = store.events(run.id)
    text = json.dumps([[e.reason, e.data] for e in events])
    assert STORED not in text and text.count(MASK) >= 4
    store.close()


def test_webhook_payloads_hold_no_secret_value(monkeypatch):
    from corral.notify import payloads
    from corral.store.records import EventRecord

    monkeypatch.setenv("RUNPOD_API_KEY", RUNPOD)
    SecretStore().set("HOOKED_SECRET", STORED)
    event = EventRecord(
        id=1,
        run_id="r1",
        attempt=1,
        ts=datetime(2026, 1, 1, tzinfo=UTC),
        type="checkpoint.saved",
        reason=f"saved {STORED}",
        data={"stage": "train", "step": 1, "metrics": {RUNPOD: 1.0}},
    )
    body = payloads.encode(payloads.build(event, run_name="n", webhook=0), None).decode()
    assert STORED not in body and RUNPOD not in body
    assert json.loads(body)["reason"] == f"saved {MASK}"


def test_dispatcher_resolves_webhook_secrets_from_the_store():
    from corral.notify.dispatcher import Dispatcher

    SecretStore().set("WEBHOOK_KEY", STORED)
    dispatcher = Dispatcher(store=None)
    assert dispatcher.secret_resolver("WEBHOOK_KEY") == STORED


@pytest.mark.parametrize("value", [STORED, RUNPOD])
def test_http_helper_errors_hold_no_secret_value(value):
    import httpx

    from corral.errors import ProviderError
    from corral.providers.http import ProviderHTTP, RetryPolicy

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"message": f"bad key {value}"})

    http = ProviderHTTP(
        "runpod",
        "https://api.example.test",
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        token=value,
        retry=RetryPolicy(max_attempts=1),
    )
    with pytest.raises(ProviderError) as info:
        http.get_json("/pods")
    assert value not in str(info.value)
