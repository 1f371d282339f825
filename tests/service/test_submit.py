"""Submitting runs through the service: a tiny job end to end (list, details, logs,
events), a spec given as text, and the checks that refuse a spec before anything is
recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.helpers import write_spec
from corral.errors import BadInput, InfeasibleRequest, NotFound, SpecError
from corral.service.actions import wait_for_end
from corral.service.details import get_run
from corral.service.events import run_events
from corral.service.logs import open_logs
from corral.service.runs import list_runs
from corral.service.submit import TEXT_SOURCE, submit_run

HELLO = """
    name: hello
    stages:
      - name: prep
        run: echo "prep done"
      - name: train
        needs: [prep]
        run: echo "greeting=$GREETING"
    env: {GREETING: hello}
"""


def test_a_tiny_job_runs_to_the_end_and_shows_in_list_details_logs_and_events(
    tmp_path: Path,
) -> None:
    submitted = submit_run(write_spec(tmp_path, HELLO), overrides=["env.GREETING=bonjour"])
    assert submitted.warnings == []
    run = submitted.run
    assert run.name == "hello" and run.spec_path == str(tmp_path / "corral.yaml")
    assert run.state in {"PROVISIONING", "RUNNING", "SUCCEEDED"}  # the first attempt launched
    end = wait_for_end(run.id, timeout_s=60)
    assert end.state == "SUCCEEDED", end.reason
    assert [r.id for r in list_runs()] == [run.id]
    details = get_run(run.id)
    assert [a.number for a in details.attempts] == [1] and details.duration_s is not None
    assert {s["name"]: s["state"] for s in details.stages} == {
        "prep": "succeeded",
        "train": "succeeded",
    }
    texts = {(ln.stage, ln.text) for ln in open_logs(run.id).read()}
    assert {("prep", "prep done"), ("train", "greeting=bonjour")} <= texts
    states = [e.data["to"] for e in run_events(run.id, types=["run.state"]).events]
    assert states[0] == "PENDING" and states[-1] == "SUCCEEDED"


def test_a_spec_given_as_text_resolves_paths_against_base_dir(tmp_path: Path) -> None:
    submitted = submit_run(text="name: inline\nrun: echo hi\n", base_dir=tmp_path)
    assert submitted.run.spec_path == TEXT_SOURCE
    assert submitted.run.workdir == str(tmp_path)
    assert wait_for_end(submitted.run.id, timeout_s=60).state == "SUCCEEDED"


def test_the_over_budget_warning_is_returned_as_data(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_LOCAL_PRICE_PER_HOUR", "2.0")
    body = "name: pricey\nbudget: {max_cost_usd: 5}\nlimits: {max_runtime: 6h}\nrun: 'true'\n"
    submitted = submit_run(write_spec(tmp_path, body))
    (warning,) = submitted.warnings
    assert (warning.provider, warning.worst_cost_usd, warning.budget_usd) == ("local", 12.0, 5.0)
    assert warning.hours_at_budget == 2.5


def test_refusals_record_nothing(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(BadInput, match="either as a file path or as text"):
        submit_run()
    with pytest.raises(BadInput, match="either as a file path or as text"):
        submit_run(tmp_path / "corral.yaml", text="name: x\nrun: echo\n")
    with pytest.raises(NotFound, match="spec file not found"):
        submit_run(tmp_path / "missing.yaml")
    with pytest.raises(SpecError, match="resorces"):
        submit_run(text="name: x\nrun: echo\nresorces: {}\n")
    nowhere = write_spec(tmp_path, "name: nowhere\nworkdir: /nonexistent/dir\nrun: echo\n")
    with pytest.raises(BadInput, match="workdir /nonexistent/dir does not exist"):
        submit_run(nowhere)
    with pytest.raises(BadInput, match="secret not set: MISSING_TOKEN"):
        submit_run(text="name: s\nsecrets: [MISSING_TOKEN]\nrun: echo\n")
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    greedy = 'name: greedy\nresources: {gpus: "L40S:4"}\nrun: echo never\n'
    with pytest.raises(InfeasibleRequest, match=r"has 2 L40S GPUs.*asks for 4"):
        submit_run(text=greedy)
    assert list_runs() == []


def test_a_launch_parses_plans_and_resolves_its_secrets_once(tmp_path: Path, monkeypatch) -> None:
    """``corral launch`` decides once: the spec it parsed, the plan it made to refuse an
    infeasible job and the secrets it resolved are what its first attempt launches with."""
    import importlib

    import corral.control.planner as planner_mod
    from corral.spec import JobSpec

    # the module (the package's ``resolve`` attribute is the function of the same name)
    resolve_mod = importlib.import_module("corral.secrets.resolve")

    calls: dict[str, int] = {"plan": 0, "validate": 0, "resolve": 0}
    real_plan, real_resolve = planner_mod.plan, resolve_mod.resolve
    real_validate = JobSpec.model_validate.__func__  # type: ignore[attr-defined]

    def plan(*a, **kw):
        calls["plan"] += 1
        return real_plan(*a, **kw)

    def resolve(*a, **kw):
        calls["resolve"] += 1
        return real_resolve(*a, **kw)

    def validate(cls, *a, **kw):
        calls["validate"] += 1
        return real_validate(cls, *a, **kw)

    monkeypatch.setattr(planner_mod, "plan", plan)
    monkeypatch.setattr(resolve_mod, "resolve", resolve)
    monkeypatch.setattr(JobSpec, "model_validate", classmethod(validate))
    monkeypatch.setenv("ONCE_TOKEN", "tok-123")
    body = 'name: once\nsecrets: [ONCE_TOKEN]\nrun: test "$ONCE_TOKEN" = tok-123 && echo got-it\n'
    submitted = submit_run(write_spec(tmp_path, body))
    assert calls == {"plan": 1, "validate": 1, "resolve": 1}
    assert submitted.run.state in {"PROVISIONING", "RUNNING", "SUCCEEDED"}
    end = wait_for_end(submitted.run.id, timeout_s=60)
    assert end.state == "SUCCEEDED", end.reason
    assert "got-it" in {ln.text for ln in open_logs(end.id).read()}
