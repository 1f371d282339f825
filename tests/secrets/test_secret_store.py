"""The encrypted secret store: round trips, permissions, keys and rotation."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from corral.errors import BadInput
from corral.secrets import (
    ENV_SECRET_KEY,
    KeyRing,
    SecretKeyError,
    SecretStore,
    resolve,
    resolve_many,
)

VALUE = "hf_Zq8s9dkKq0b1LmNoPq"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)


def test_set_then_get_round_trips_and_the_file_holds_no_plaintext(corral_home: Path):
    store = SecretStore()
    store.set("HF_TOKEN", VALUE)
    assert SecretStore().get("HF_TOKEN") == VALUE
    raw = (corral_home / "secrets.json").read_text()
    assert VALUE not in raw and "HF_TOKEN" in raw
    token = json.loads(raw)["secrets"]["HF_TOKEN"]["token"]
    key = (corral_home / "secret.key").read_text().split()[0].encode()
    assert Fernet(key).decrypt(token.encode()).decode() == VALUE


def test_key_and_store_files_are_created_with_mode_0600_whatever_the_umask(corral_home: Path):
    old = os.umask(0)
    try:
        SecretStore().set("A_SECRET", VALUE)
    finally:
        os.umask(old)
    assert mode(corral_home / "secret.key") == 0o600
    assert mode(corral_home / "secrets.json") == 0o600


def test_values_round_trip_unicode_and_multiline(corral_home: Path):
    store = SecretStore()
    pem = "-----BEGIN KEY-----\nabc\u00e9\u2603\n-----END KEY-----"
    store.set("PEM", pem)
    assert store.get("PEM") == pem


def test_set_again_keeps_created_at_and_moves_updated_at(corral_home: Path):
    from datetime import UTC, datetime, timedelta

    times = iter([datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)])
    store = SecretStore(clock=lambda: next(times))
    first = store.set("X_TOKEN", VALUE)
    second = store.set("X_TOKEN", VALUE + "2")
    assert second.created_at == first.created_at
    assert second.updated_at - first.updated_at == timedelta(days=1)
    assert store.get("X_TOKEN") == VALUE + "2"


def test_list_gives_names_and_dates_and_needs_no_key(corral_home: Path):
    SecretStore().set("B_TOKEN", VALUE)
    SecretStore().set("A_TOKEN", VALUE)
    (corral_home / "secret.key").unlink()  # no key at all: listing still works
    infos = SecretStore().list()
    assert [i.name for i in infos] == ["A_TOKEN", "B_TOKEN"]
    assert set(infos[0].to_dict()) == {"name", "created_at", "updated_at"}
    with pytest.raises(SecretKeyError, match="no key"):
        SecretStore().get("A_TOKEN")


def test_delete_removes_and_reports_missing(corral_home: Path):
    store = SecretStore()
    store.set("GONE_SOON", VALUE)
    assert store.delete("GONE_SOON") is True
    assert store.delete("GONE_SOON") is False
    assert store.get("GONE_SOON") is None


@pytest.mark.parametrize("name", ["lower", "1ABC", "WITH-DASH", "", "A B", VALUE])
def test_invalid_names_are_refused_without_echoing_them(corral_home: Path, name: str):
    with pytest.raises(BadInput) as info:
        SecretStore().set(name, VALUE)
    assert name not in str(info.value) or name == ""


def test_empty_nul_and_huge_values_are_refused(corral_home: Path):
    store = SecretStore()
    for bad in ("", "a\0b", "x" * (64 * 1024 + 1)):
        with pytest.raises(BadInput):
            store.set("BAD_VALUE", bad)
    assert store.names() == []


def test_key_from_environment_is_used_and_no_key_file_is_written(corral_home, monkeypatch):
    key = Fernet.generate_key().decode()
    monkeypatch.setenv(ENV_SECRET_KEY, key)
    SecretStore().set("ENV_KEYED", VALUE)
    assert not (corral_home / "secret.key").exists()
    token = json.loads((corral_home / "secrets.json").read_text())["secrets"]["ENV_KEYED"]
    assert Fernet(key.encode()).decrypt(token["token"].encode()).decode() == VALUE
    monkeypatch.setenv(ENV_SECRET_KEY, Fernet.generate_key().decode())
    with pytest.raises(SecretKeyError, match="cannot be decrypted") as info:
        SecretStore().get("ENV_KEYED")
    assert VALUE not in str(info.value)


def test_malformed_environment_key_is_refused_without_showing_it(corral_home, monkeypatch):
    monkeypatch.setenv(ENV_SECRET_KEY, "not-a-real-key-but-secret")
    with pytest.raises(SecretKeyError) as info:
        SecretStore().set("ANY_NAME", VALUE)
    assert "not-a-real-key-but-secret" not in str(info.value)
    assert "key #1" in str(info.value)


def test_key_file_readable_by_others_is_refused(corral_home: Path):
    SecretStore().set("LOCKED_DOWN", VALUE)
    (corral_home / "secret.key").chmod(0o644)
    with pytest.raises(SecretKeyError, match="chmod 600"):
        SecretStore().get("LOCKED_DOWN")


def test_concurrent_first_use_creates_one_key(corral_home: Path):
    keys: list[list[bytes]] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait()
        keys.append(KeyRing(corral_home).keys(create=True))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 8
    assert len({tuple(k) for k in keys}) == 1 and len(keys[0]) == 1
    assert not [p for p in corral_home.iterdir() if p.name.endswith(".tmp")]


def test_concurrent_sets_from_many_threads_lose_no_secret(corral_home: Path):
    def put(i: int) -> None:
        SecretStore().set(f"S_{i}", f"value-{i:04d}")

    threads = [threading.Thread(target=put, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert SecretStore().values() == {f"S_{i}": f"value-{i:04d}" for i in range(12)}


def test_rotate_puts_a_new_key_first_reencrypts_and_old_keys_still_decrypt(corral_home: Path):
    store = SecretStore()
    store.set("ONE_TOKEN", VALUE)
    store.set("TWO_TOKEN", VALUE[::-1])
    old_key = (corral_home / "secret.key").read_text().split()
    old_token = json.loads((corral_home / "secrets.json").read_text())["secrets"]["ONE_TOKEN"]

    assert store.rotate() == 2
    keys = (corral_home / "secret.key").read_text().split()
    assert len(keys) == 2 and keys[1:] == old_key and keys[0] != old_key[0]
    assert mode(corral_home / "secret.key") == 0o600
    doc = json.loads((corral_home / "secrets.json").read_text())["secrets"]
    # re-encrypted with the new primary key alone
    assert Fernet(keys[0].encode()).decrypt(doc["ONE_TOKEN"]["token"].encode()) == VALUE.encode()
    assert store.values() == {"ONE_TOKEN": VALUE, "TWO_TOKEN": VALUE[::-1]}
    # a token made with the old key (a backup, a concurrent writer) still decrypts
    doc["OLD_COPY"] = old_token
    (corral_home / "secrets.json").write_text(json.dumps({"format": 1, "secrets": doc}))
    assert SecretStore().get("OLD_COPY") == VALUE


def test_rotate_drop_old_leaves_only_the_new_key(corral_home: Path):
    store = SecretStore()
    store.set("ONE_TOKEN", VALUE)
    store.rotate(drop_old=True)
    keys = (corral_home / "secret.key").read_text().split()
    assert len(keys) == 1
    assert store.get("ONE_TOKEN") == VALUE


def test_rotate_with_environment_keys_reencrypts_with_the_first(corral_home, monkeypatch):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv(ENV_SECRET_KEY, old)
    SecretStore().set("ROT_ENV", VALUE)
    monkeypatch.setenv(ENV_SECRET_KEY, f"{new},{old}")
    assert SecretStore().rotate() == 1
    monkeypatch.setenv(ENV_SECRET_KEY, new)  # the old key can go now
    assert SecretStore().get("ROT_ENV") == VALUE
    with pytest.raises(SecretKeyError, match="CORRAL_SECRET_KEY"):
        SecretStore().rotate(drop_old=True)


def test_rotate_changes_nothing_when_a_value_cannot_be_decrypted(corral_home: Path):
    store = SecretStore()
    store.set("ONE_TOKEN", VALUE)
    (corral_home / "secret.key").write_text(Fernet.generate_key().decode() + "\n")
    before = (corral_home / "secret.key").read_text()
    with pytest.raises(SecretKeyError):
        store.rotate()
    assert (corral_home / "secret.key").read_text() == before


def test_resolve_prefers_the_store_then_the_environment(corral_home, monkeypatch):
    monkeypatch.setenv("BOTH_PLACES", "from-the-environment")
    monkeypatch.setenv("ENV_ONLY", "env-only-value")
    monkeypatch.setenv("EMPTY_ONE", "")
    SecretStore().set("BOTH_PLACES", VALUE)
    assert resolve("BOTH_PLACES") == VALUE
    assert resolve("ENV_ONLY") == "env-only-value"
    assert resolve("EMPTY_ONE") is None
    assert resolve("NOWHERE_AT_ALL") is None


def test_resolve_from_the_environment_needs_no_key(corral_home, monkeypatch):
    SecretStore().set("IN_STORE", VALUE)
    (corral_home / "secret.key").unlink()
    monkeypatch.setenv("ENV_ONLY", "env-only-value")
    assert resolve("ENV_ONLY") == "env-only-value"


def test_resolve_many_names_every_missing_secret(corral_home, monkeypatch):
    monkeypatch.setenv("PRESENT_ONE", "present-value")
    with pytest.raises(BadInput) as info:
        resolve_many(["PRESENT_ONE", "MISSING_A", "MISSING_B"])
    assert "MISSING_A, MISSING_B" in str(info.value)
    assert "present-value" not in str(info.value)
    assert info.value.fields["missing"] == ["MISSING_A", "MISSING_B"]
    assert resolve_many(["PRESENT_ONE", "PRESENT_ONE"]) == {"PRESENT_ONE": "present-value"}
    assert resolve_many([]) == {}
