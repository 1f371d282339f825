"""Credentials in a config are written down as *** (config.json, checkpoints, the HF file),
while the config in memory keeps them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from corral.sdk import load_config
from corral.sdk.config import TrainingConfig, config_path
from corral.sdk.config.masking import is_secret_key, masked
from corral.sdk.resume import plain_config

ENV_SECRET = "s3cr3t-from-env-12345"


@dataclasses.dataclass
class Hub:
    repo: str = "me/model"
    api_key: str = ""


@dataclasses.dataclass
class Cfg(TrainingConfig):
    lr: float = 1e-3
    hf_token: str = ""
    pad_token: str = "<pad>"
    eos_token: str = "</s>"
    max_new_tokens: int = 64
    notes: str = ""
    hub: Hub = dataclasses.field(default_factory=Hub)
    use_auth_token: bool = False


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ACME_API_TOKEN", ENV_SECRET)


def test_the_saved_config_masks_credentials_and_keeps_everything_else(sdk_sandbox):
    cfg = load_config(
        Cfg,
        argv=["--set", "hf_token=hf_abcdefghijkl", "--set", "hub.api_key=key-0123456789",
              "--set", f"notes=token is {ENV_SECRET}", "--set", "use_auth_token=true"],
    )  # fmt: skip
    assert cfg.hf_token == "hf_abcdefghijkl" and cfg.hub.api_key == "key-0123456789"
    saved = json.loads(config_path().read_text())
    assert saved["hf_token"] == "***" and saved["hub"]["api_key"] == "***"
    assert saved["notes"] == "token is ***"
    assert saved["pad_token"] == "<pad>" and saved["eos_token"] == "</s>"
    assert saved["max_new_tokens"] == 64 and saved["use_auth_token"] is True
    assert saved["hub"]["repo"] == "me/model" and saved["lr"] == 1e-3
    text = config_path().read_text()
    assert "hf_abcdefghijkl" not in text and "key-0123456789" not in text
    assert ENV_SECRET not in text


def test_checkpoints_get_the_masked_config(sdk_sandbox):
    cfg = Cfg(hf_token="hf_abcdefghijkl")
    for form in (cfg, cfg.to_dict(), dataclasses.asdict(cfg)):
        plain = plain_config(form)
        assert plain["hf_token"] == "***" and plain["pad_token"] == "<pad>"
    assert cfg.to_dict()["hf_token"] == "hf_abcdefghijkl"  # to_dict itself is exact


def test_which_names_are_credentials():
    for name in ("hf_token", "token", "api_key", "wandb_api_key", "password", "db_password",
                 "secret", "aws_secret_access_key", "access_key_id", "credentials"):  # fmt: skip
        assert is_secret_key(name), name
    for name in ("pad_token", "bos_token", "eos_token", "unk_token", "mask_token",
                 "max_new_tokens", "tokenizer", "token_limit", "num_tokens", "keyword"):  # fmt: skip
        assert not is_secret_key(name), name
    assert masked({"token": "", "password": None}) == {"token": "", "password": None}
