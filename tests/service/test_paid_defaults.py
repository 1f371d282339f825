"""A paid run whose spec sets no ``budget.max_cost_usd`` gets the default cap (said at launch,
shown by ``corral status``, enforced like the spec's own); ``max_cost_usd: null`` opts out;
free machines get none; the default is configurable and a bad value is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from control.helpers import write_spec
from corral.cli.app import app
from corral.errors import BadInput
from corral.service.actions import wait_for_end
from corral.service.details import get_run
from corral.service.submit import submit_run
from corral.store import Store

RUN = "name: {name}\nrun: 'true'\n"


def _submit(tmp_path: Path, body: str):
    sub = submit_run(write_spec(tmp_path, body))
    wait_for_end(sub.run.id, timeout_s=60)
    return sub


@pytest.fixture
def paid(monkeypatch) -> None:
    """The local provider at $2 an hour: its offers cost money."""
    monkeypatch.setenv("CORRAL_LOCAL_PRICE_PER_HOUR", "2.0")


def test_a_paid_run_without_a_cap_gets_the_default_said_at_launch_and_in_status(
    tmp_path: Path, paid
) -> None:
    sub = _submit(tmp_path, RUN.format(name="nocap"))
    [notice] = [n for n in sub.notices if n.startswith("budget:")]
    assert "default cap $10.00 applies, warning at 90%" in notice
    assert "CORRAL_DEFAULT_MAX_COST_USD" in notice and "max_cost_usd: null" in notice
    run = Store.open().get_run(sub.run.id)
    assert run.spec is not None
    assert run.spec["budget"]["max_cost_usd"] == 10.0  # what the budget watcher enforces
    details = get_run(sub.run.id)
    assert details.budget == "$10.00, warning at 90% (the default: CORRAL_DEFAULT_MAX_COST_USD)"
    out = CliRunner().invoke(app, ["status", sub.run.id])
    assert "budget      $10.00, warning at 90% (the default" in out.stdout


def test_the_default_is_configurable_and_a_spec_keeps_what_it_says(
    tmp_path: Path, paid, monkeypatch
) -> None:
    monkeypatch.setenv("CORRAL_DEFAULT_MAX_COST_USD", "25")
    monkeypatch.setenv("CORRAL_DEFAULT_WARN_AT", "0.5")
    sub = _submit(tmp_path, RUN.format(name="configured"))
    assert get_run(sub.run.id).budget == (
        "$25.00, warning at 50% (the default: CORRAL_DEFAULT_MAX_COST_USD)"
    )
    own = tmp_path / "own"
    own.mkdir()
    sub = _submit(own, RUN.format(name="own") + "budget: {max_cost_usd: 3, warn_at: 0.8}\n")
    assert not [n for n in sub.notices if n.startswith("budget:")]
    assert get_run(sub.run.id).budget == "$3.00, warning at 80%"
    warn_only = tmp_path / "warn"
    warn_only.mkdir()
    sub = _submit(warn_only, RUN.format(name="warnonly") + "budget: {warn_at: 0.75}\n")
    assert get_run(sub.run.id).budget == (
        "$25.00, warning at 75% (the default: CORRAL_DEFAULT_MAX_COST_USD)"
    )


def test_null_opts_out_and_says_so(tmp_path: Path, paid) -> None:
    sub = _submit(tmp_path, RUN.format(name="optout") + "budget: {max_cost_usd: null}\n")
    assert "nothing stops this run for money" in " ".join(sub.notices)
    run = Store.open().get_run(sub.run.id)
    assert run.spec is not None and run.spec["budget"]["max_cost_usd"] is None
    assert get_run(sub.run.id).budget == "none (opted out: budget.max_cost_usd is null)"


def test_free_machines_get_no_default_and_none_turns_it_off(tmp_path: Path, monkeypatch) -> None:
    sub = _submit(tmp_path, RUN.format(name="free"))  # the local provider costs nothing
    assert get_run(sub.run.id).budget is None
    assert "budget" not in get_run(sub.run.id).to_json()
    monkeypatch.setenv("CORRAL_LOCAL_PRICE_PER_HOUR", "2.0")
    monkeypatch.setenv("CORRAL_DEFAULT_MAX_COST_USD", "none")
    off = tmp_path / "off"
    off.mkdir()
    sub = _submit(off, RUN.format(name="nodefault"))
    assert get_run(sub.run.id).budget is None


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("CORRAL_DEFAULT_MAX_COST_USD", "ten", "'ten' is not an amount of dollars above 0"),
        ("CORRAL_DEFAULT_MAX_COST_USD", "-1", "'-1' is not an amount of dollars above 0"),
        ("CORRAL_DEFAULT_WARN_AT", "1.5", "'1.5' is not a fraction in (0, 1]"),
    ],
)
def test_a_bad_default_is_one_line_and_records_nothing(
    tmp_path: Path, paid, monkeypatch, var: str, value: str, message: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(BadInput) as info:
        submit_run(write_spec(tmp_path, RUN.format(name="bad")))
    assert str(info.value) == f"{var}: {message} (or 'none')"
    assert Store.open().list_runs() == []


def test_a_paid_run_gets_the_default_idle_stop_unless_it_serves_or_opts_out(
    tmp_path: Path, paid, monkeypatch
) -> None:
    sub = _submit(tmp_path, RUN.format(name="idle"))
    [notice] = [n for n in sub.notices if n.startswith("idle:")]
    assert "stops after 30 min with no progress, GPU, CPU or memory activity" in notice
    spec = Store.open().get_run(sub.run.id).spec
    assert spec is not None and spec["limits"]["idle_timeout"] == 1800.0
    optout = tmp_path / "optout"
    optout.mkdir()
    sub = _submit(optout, RUN.format(name="noidle") + "limits: {idle_timeout: null}\n")
    assert not [n for n in sub.notices if n.startswith("idle:")]
    assert Store.open().get_run(sub.run.id).spec["limits"]["idle_timeout"] is None  # type: ignore[index]
    serving = tmp_path / "serving"
    serving.mkdir()
    body = (
        "name: serving\nstages:\n  - {name: train, run: 'true'}\n"
        "  - {name: web, run: 'sleep 1', needs: [train], service: {ports: [8000]}}\n"
    )
    sub = submit_run(write_spec(serving, body))
    assert not [n for n in sub.notices if n.startswith("idle:")]
    monkeypatch.setenv("CORRAL_DEFAULT_IDLE_TIMEOUT", "45m")
    other = tmp_path / "other"
    other.mkdir()
    sub = _submit(other, RUN.format(name="idle45"))
    assert Store.open().get_run(sub.run.id).spec["limits"]["idle_timeout"] == 2700.0  # type: ignore[index]
    monkeypatch.setenv("CORRAL_DEFAULT_IDLE_TIMEOUT", "soon")
    with pytest.raises(BadInput, match=r"^CORRAL_DEFAULT_IDLE_TIMEOUT: 'soon' is not a duration"):
        submit_run(write_spec(other, RUN.format(name="idlebad")))
