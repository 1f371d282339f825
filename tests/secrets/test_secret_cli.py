"""``corral secret set|list|rm|rotate`` through the CLI runner (stdin is not a terminal)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from corral.cli.secret import app
from corral.secrets import SecretStore

VALUE = "ghp_cliSecretValue000111"
runner = CliRunner()


def invoke(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def test_set_reads_the_value_from_stdin_and_never_echoes_it(corral_home):
    res = invoke("set", "GH_TOKEN", input=VALUE + "\n")
    assert res.exit_code == 0, res.output
    assert VALUE not in res.output and "GH_TOKEN" in res.output
    assert SecretStore().get("GH_TOKEN") == VALUE  # the trailing newline is not part of it
    assert VALUE not in (corral_home / "secrets.json").read_text()


def test_set_keeps_inner_newlines_and_strips_one_crlf(corral_home):
    assert invoke("set", "MULTI_LINE", input="line1\nline2\r\n").exit_code == 0
    assert SecretStore().get("MULTI_LINE") == "line1\nline2"


def test_set_refuses_a_value_given_as_an_argument_without_echoing_it(corral_home):
    res = invoke("set", "GH_TOKEN", VALUE)
    assert res.exit_code == 2
    assert VALUE not in res.output and "never a command-line argument" in res.output
    assert SecretStore().names() == []


def test_set_refuses_an_empty_value_and_a_bad_name(corral_home):
    assert invoke("set", "EMPTY_ONE", input="").exit_code == 2
    res = invoke("set", "lower_case", input=VALUE)
    assert res.exit_code == 2 and "invalid secret name" in res.output
    assert SecretStore().names() == []


def test_list_shows_names_and_dates_never_values(corral_home):
    invoke("set", "B_TOKEN", input=VALUE)
    invoke("set", "A_TOKEN", input=VALUE + "x")
    res = invoke("list")
    assert res.exit_code == 0
    assert "A_TOKEN" in res.output and "B_TOKEN" in res.output and VALUE not in res.output
    res = invoke("list", "--json")
    rows = json.loads(res.output)
    assert [r["name"] for r in rows] == ["A_TOKEN", "B_TOKEN"]
    assert all(set(r) == {"name", "created_at", "updated_at"} for r in rows)
    assert VALUE not in res.output


def test_list_of_an_empty_store_says_how_to_add_one(corral_home):
    res = invoke("list")
    assert res.exit_code == 0 and "corral secret set" in res.output
    assert json.loads(invoke("list", "--json").output) == []


def test_rm_deletes_and_a_missing_name_exits_3(corral_home):
    invoke("set", "GH_TOKEN", input=VALUE)
    res = invoke("rm", "GH_TOKEN", "--json")
    assert res.exit_code == 0 and json.loads(res.output) == {"name": "GH_TOKEN", "deleted": True}
    res = invoke("rm", "GH_TOKEN")
    assert res.exit_code == 3 and "no secret named GH_TOKEN" in res.output


def test_rotate_reencrypts_and_reports_the_keys(corral_home):
    invoke("set", "GH_TOKEN", input=VALUE)
    res = invoke("rotate", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["reencrypted"] == 1 and json.loads(res.output)["keys"] == 2
    res = invoke("rotate", "--drop-old")
    assert res.exit_code == 0 and "1 key in" in res.output
    assert SecretStore().get("GH_TOKEN") == VALUE
    assert VALUE not in res.output
