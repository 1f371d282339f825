"""Secrets: an encrypted store, resolution by name, and redaction of every value in play.

* :class:`SecretStore` - Fernet-encrypted values in ``CORRAL_HOME/secrets.json`` (0600), the
  key in ``CORRAL_HOME/secret.key`` (0600) or ``CORRAL_SECRET_KEY``; rotation with MultiFernet.
* :func:`resolve` / :func:`resolve_many` - a value by name: the store, then the environment.
* :class:`Redactor`, :func:`redact`, :func:`redact_data`, :func:`install_log_redaction` -
  ``***`` for every secret value in logs, events, webhook payloads and copied stage logs
  (values shorter than 6 characters are left alone).

See docs/providers.md ("Secrets and credentials"). ``cryptography`` is imported only when a
value is encrypted or decrypted.
"""

from corral.secrets.keys import ENV_SECRET_KEY, KEY_FILE, KeyRing, SecretKeyError
from corral.secrets.redact import (
    MASK,
    MIN_LENGTH,
    RedactingFilter,
    Redactor,
    current_redactor,
    forget_registered,
    install_log_redaction,
    redact,
    redact_data,
    redactor_for,
    register_names,
    register_values,
)
from corral.secrets.resolve import resolve, resolve_many
from corral.secrets.store import STORE_FILE, SecretInfo, SecretStore, check_name

__all__ = [
    "ENV_SECRET_KEY",
    "KEY_FILE",
    "MASK",
    "MIN_LENGTH",
    "STORE_FILE",
    "KeyRing",
    "RedactingFilter",
    "Redactor",
    "SecretInfo",
    "SecretKeyError",
    "SecretStore",
    "check_name",
    "current_redactor",
    "forget_registered",
    "install_log_redaction",
    "redact",
    "redact_data",
    "redactor_for",
    "register_names",
    "register_values",
    "resolve",
    "resolve_many",
]
