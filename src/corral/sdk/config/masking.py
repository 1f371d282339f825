"""Secrets kept out of the configs corral writes down (``config.json``, every checkpoint, the HF
callback's ``corral_config.json``): those files are copied to object storage and kept for months,
and a token in them outlives its rotation.

Two rules, both applied to the plain (JSON-like) form of a config:

* a string field whose name says it holds a credential (``hf_token``, ``api_key``,
  ``password``, ``secret``, ``aws_secret_access_key``, ...: the names
  :func:`corral.secrets.redact.is_credential_name` recognises, at any depth) is written as
  ``***``; the special tokens of tokenizers (``pad_token``, ``eos_token``, ...) are not secrets;
* any value equal to a secret in play (a credential in the environment, the secret store) is
  written as ``***`` wherever it appears (:func:`corral.secrets.redact.redact_data`).

The config object in memory keeps its values; only what is written is masked.
"""

from __future__ import annotations

import re
from typing import Any

from corral.secrets.redact import MASK, is_credential_name, redact_data

_TOKENIZER_TOKENS = re.compile(
    r"(?:^|_)(?:pad|bos|eos|unk|sep|cls|mask|sos|start|end|image|audio|video|special)_tokens?$",
    re.IGNORECASE,
)


def is_secret_key(name: str) -> bool:
    """Whether a config field of this name holds a credential."""
    return is_credential_name(name) and not _TOKENIZER_TOKENS.search(name)


def masked(data: Any) -> Any:
    """``data`` (a config as a plain dict) as it may be written down: see the module doc."""

    def walk(value: Any, key: str | None) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, key) for v in value]
        if key is not None and isinstance(value, str) and value and is_secret_key(key):
            return MASK
        return value

    return redact_data(walk(data, None))
