"""Sweeps (``corral sweep launch|status|stop|ls``): a hyperparameter search whose trials are
corral runs (the controller runs it: :mod:`corral.control.sweeping`).

A sweep file is a job spec with a ``sweep:`` section (:mod:`corral.spec.sweep`). At launch
everything is checked before anything is recorded: the job spec, the section, each
parameter's path against the job spec (a trial's spec is built with the first value of each),
that an enabled provider can run the job, that the sweep's budget covers at least one trial,
and that Optuna is installed when the search or the pruner needs it. A paid job gets the
default run budget (:mod:`corral.service.paid_defaults`) as any launch does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from corral.control.providers import load_providers
from corral.control.sweeping import best_trial, trial_spec
from corral.errors import BadInput, Conflict, InfeasibleRequest
from corral.providers.base import Provider
from corral.service import caps, paid_defaults
from corral.service._store import using
from corral.service.feasibility import launch_plan, refusal
from corral.service.views import IsoDatetime, View
from corral.spec import load_spec_text
from corral.spec.report import Locator, spec_error, translate
from corral.spec.sweep import SweepSpec
from corral.spec.yamlsrc import parse_yaml
from corral.store import Store
from corral.store.records import SweepRecord


class TrialView(View):
    number: int
    run_id: str
    state: str
    params: dict[str, Any]
    value: float | None
    step: int | None
    cost_usd: float
    best: bool


class SweepView(View):
    name: str
    state: str
    reason: str
    metric: str
    goal: str
    search: str
    max_trials: int
    max_parallel: int
    budget_usd: float | None
    spent_usd: float
    best_trial: int | None
    best_value: float | None
    best_params: dict[str, Any] | None
    created_at: IsoDatetime
    finished_at: IsoDatetime | None
    trials: list[TrialView]


class SweepList(View):
    sweeps: list[SweepView]


def _view(store: Store, sweep: SweepRecord) -> SweepView:
    spec = SweepSpec.model_validate(sweep.sweep)
    trials = store.trials(sweep.name)
    best = best_trial(spec, trials)
    return SweepView(
        name=sweep.name,
        state=sweep.state,
        reason=sweep.reason,
        metric=spec.metric.name,
        goal=spec.metric.goal,
        search=spec.search,
        max_trials=spec.max_trials,
        max_parallel=spec.max_parallel,
        budget_usd=spec.budget.max_cost_usd,
        spent_usd=round(sum(t.cost_usd for t in trials), 6),
        best_trial=best.number if best else None,
        best_value=best.value if best else None,
        best_params=dict(best.params) if best else None,
        created_at=sweep.created_at,
        finished_at=sweep.finished_at,
        trials=[
            TrialView(
                number=t.number,
                run_id=t.run_id,
                state=t.state,
                params=dict(t.params),
                value=t.value,
                step=t.step,
                cost_usd=round(t.cost_usd, 6),
                best=best is not None and t.number == best.number,
            )
            for t in trials
        ],
    )


def load_sweep(path: str | Path, overrides: list[str] | None = None) -> tuple[Any, SweepSpec]:
    """(the job spec, the sweep section) of a sweep file, every problem in one SpecError."""
    file = Path(path)
    if file.is_dir():
        file = file / "corral.yaml"
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{file}: cannot read it ({exc.strerror})") from None
    parsed = parse_yaml(text, str(file))
    if not isinstance(parsed.data, dict) or "sweep" not in parsed.data:
        raise BadInput(f"{file}: no `sweep:` section (a sweep file is a job spec with one)")
    data = dict(parsed.data)
    raw = data.pop("sweep")
    try:
        sweep = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        where = Locator(
            str(file), {k[1:]: v for k, v in parsed.lines.items() if k[:1] == ("sweep",)}
        )
        errors = translate(exc, SweepSpec, where)
        for err in errors:
            err["field"] = "sweep." + err["field"] if err["field"] else "sweep"
        raise spec_error(errors) from None
    job = load_spec_text(
        yaml.safe_dump(data, sort_keys=False),
        source=str(file),
        base_dir=file.parent,
        overrides=overrides or [],
    )
    return job, sweep


def launch_sweep(
    path: str | Path,
    *,
    overrides: list[str] | None = None,
    store: Store | None = None,
    providers: dict[str, Provider] | None = None,
    owner: str | None = None,
    start_controller: bool = True,
) -> SweepView:
    job, sweep = load_sweep(path, overrides)
    needs_optuna = sweep.search != "grid" or sweep.prune.pruner != "none"
    if needs_optuna and importlib.util.find_spec("optuna") is None:
        raise BadInput(
            f"sweep.search {sweep.search} / sweep.prune.pruner {sweep.prune.pruner} need "
            "Optuna: pip install 'corral[sweeps]' (or use search: grid with pruner: none)"
        )
    first = {
        p: (spec.values[0] if spec.values is not None else spec.low)
        for p, spec in sweep.parameters.items()
    }
    for p, spec in sweep.parameters.items():
        if spec.values is None and spec.int_:
            first[p] = int(spec.low or 0)
    trial_spec(job.model_dump(mode="json"), first, None)  # every path exists, every value fits
    skipped: dict[str, str] = {}
    if providers is None:
        providers, skipped = load_providers()
    result = launch_plan(job, providers=providers, skipped=skipped)
    refused = refusal(result, str(path))
    if refused:
        raise InfeasibleRequest(refused)
    job, _choice = paid_defaults.choose(job, result.available or result.offers)
    per_trial, _why = caps.expected_cost(job, result.available or result.offers)
    cap = sweep.budget.max_cost_usd
    if cap is not None and per_trial > cap:
        raise BadInput(
            f"sweep.budget.max_cost_usd ${cap:.2f} is below one trial's expected cost "
            f"${per_trial:.2f} (its budget.max_cost_usd, or the price over max_runtime)"
        )
    with using(store) as st:
        record = st.add_sweep(
            name=job.name,
            sweep=sweep.shown(),
            job=job.model_dump(mode="json"),
            spec_path=str(Path(path).resolve()),
            owner=owner if owner is not None else caps.launcher(),
        )
        view = _view(st, record)
    if start_controller:
        from corral.service.controller import ensure_controller

        ensure_controller(wait_s=0)
    return view


def sweep_status(name: str, *, store: Store | None = None) -> SweepView:
    with using(store) as st:
        return _view(st, st.get_sweep(name))


def list_sweeps(*, store: Store | None = None) -> SweepList:
    with using(store) as st:
        return SweepList(sweeps=[_view(st, s) for s in reversed(st.sweeps())])


def stop_sweep(name: str, *, store: Store | None = None) -> SweepView:
    """No new trial; the running ones are stopped gracefully (a checkpoint first)."""
    with using(store) as st:
        sweep = st.get_sweep(name)
        if sweep.state not in ("RUNNING", "STOPPING"):
            raise Conflict(f"sweep {name} already ended ({sweep.state})")
        st.update_sweep(name, expect=("RUNNING",), state="STOPPING", reason="stopped by request")
        view = _view(st, st.get_sweep(name))
    from corral.service.controller import ensure_controller

    ensure_controller(wait_s=0)
    return view
