"""Secrets: encrypted values for jobs (spec ``secrets:``), webhooks and providers. A value
goes in and never comes out through here: listing gives names and dates only."""

from __future__ import annotations

from corral.errors import NotFound
from corral.secrets import SecretInfo, SecretStore, check_name
from corral.service.views import SecretDeleted, SecretsRotated, SecretView

__all__ = [
    "check_name",
    "delete_secret",
    "list_secrets",
    "rotate_secrets",
    "set_secret",
]


def _view(info: SecretInfo) -> SecretView:
    return SecretView(name=info.name, created_at=info.created_at, updated_at=info.updated_at)


def set_secret(name: str, value: str, *, store: SecretStore | None = None) -> SecretView:
    """Encrypt and save ``value`` as secret ``name`` (upper-case, e.g. ``HF_TOKEN``), created
    or replaced. BadInput for a bad name (not echoed: it may be the value) or an empty,
    too long or NUL-holding value."""
    return _view((store or SecretStore()).set(check_name(name), value))


def list_secrets(*, store: SecretStore | None = None) -> list[SecretView]:
    """Names and dates of the stored secrets, by name. Never their values; needs no key."""
    return [_view(i) for i in (store or SecretStore()).list()]


def delete_secret(name: str, *, store: SecretStore | None = None) -> SecretDeleted:
    """Remove secret ``name``; NotFound when the store has none by that name."""
    if not (store or SecretStore()).delete(check_name(name)):
        raise NotFound(f"no secret named {name} in the store")
    return SecretDeleted(name=name)


def rotate_secrets(*, drop_old: bool = False, store: SecretStore | None = None) -> SecretsRotated:
    """Re-encrypt every secret with a new key (older keys still decrypt unless
    ``drop_old``); with ``CORRAL_SECRET_KEY`` its first key is the new one."""
    secrets = store or SecretStore()
    count = secrets.rotate(drop_old=drop_old)
    return SecretsRotated(
        reencrypted=count, keys=len(secrets.keyring.keys()), source=secrets.keyring.source
    )
