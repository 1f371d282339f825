"""`corral webhook verify --secret NAME` finds the secret where the controller does: corral's
secret store first, then the environment."""

from __future__ import annotations

import time

from typer.testing import CliRunner

from corral.cli.app import app
from corral.errors import EXIT_BAD_INPUT
from corral.notify import sign
from corral.secrets import SecretStore

BODY = b'{"id":"d-1","type":"run.finished"}'


def _verify(*secret_args: str, env: dict[str, str] | None = None, secret: str = "st0red-key"):
    ts = str(int(time.time()))
    args = ["webhook", "verify", *secret_args, "--timestamp", ts]
    args += ["--signature", sign(secret, ts, BODY)]
    result = CliRunner().invoke(app, args, input=BODY, env=env)
    return result.exit_code, result.stdout, result.stderr


def test_the_secret_is_read_from_corrals_secret_store() -> None:
    SecretStore().set("HOOK_SECRET", "st0red-key")
    code, out, err = _verify("--secret", "HOOK_SECRET")
    assert code == 0 and "signature valid" in out, err


def test_the_secret_falls_back_to_the_environment() -> None:
    code, _, err = _verify("--secret", "HOOK_SECRET", env={"HOOK_SECRET": "st0red-key"})
    assert code == 0, err


def test_a_secret_found_nowhere_is_one_line_naming_it() -> None:
    code, _, err = _verify("--secret", "NOWHERE_SECRET")
    assert code == EXIT_BAD_INPUT
    assert "NOWHERE_SECRET" in err and len(err.strip().splitlines()) == 1


def test_exactly_one_way_to_give_the_secret() -> None:
    for args in ((), ("--secret", "A_KEY", "--secret-env", "A_KEY")):
        code, _, err = _verify(*args, env={"A_KEY": "st0red-key"})
        assert code == EXIT_BAD_INPUT and "--secret" in err and "Traceback" not in err
