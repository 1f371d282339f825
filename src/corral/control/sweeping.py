"""Sweeps, the controller's side: every active sweep is advanced before each read of the
active runs, at most every :data:`ADVANCE_EVERY_S` seconds.

Advancing a sweep, from the database alone (so a restarted controller, or another one on the
same database, carries on where it was):

1. **What each trial reported**: the metric (``loss``, or a name in the stage's reported
   ``metrics``) at the step the run's agent last showed (``attempt.data["status"]``), kept per
   step in ``sweep_trials.intermediate``; the run's cost; a run that ended makes its trial
   ``complete`` (SUCCEEDED with a value), ``failed`` or ``stopped``.
2. **Pruning** (``prune.pruner: median``, Optuna's ``MedianPruner``): a running trial whose
   metric at its step is worse than the median of the finished trials' at that step (each
   finished trial's last value at or before it) is stopped gracefully, a checkpoint first,
   and recorded ``pruned``, not failed. Never before ``prune.warmup_steps`` nor before
   ``prune.min_trials`` trials finished.
3. **The budget**: the sweep's dollars cover every trial. A trial starts only when what is
   left, less what the running trials may still spend (their caps), pays for it: its
   expected cost (the mean of the finished trials', else the job's own budget) and it is
   launched with ``budget.max_cost_usd`` at most that remainder, so the trials together never
   pass the sweep's budget. ``max_hours`` past: no new trial, running ones stopped.
4. **New trials**, up to ``max_parallel`` at once and ``max_trials`` in all: ``grid`` takes
   the next combination no trial has; ``random`` and ``tpe`` ask Optuna's sampler, with a
   study rebuilt from the trials each time (``optuna`` is needed then: the ``sweeps`` extra).
   Trial ``n`` is created with its run in one transaction, once (``Store.start_trial``).
5. **The end**: no running trial and nothing more to start: FINISHED (or STOPPED when stopped
   or out of budget) with the best trial.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping
from typing import Any

from corral.control.context import Context, log
from corral.spec import JobSpec, spec_hash
from corral.spec.overrides import apply_overrides
from corral.spec.report import Locator
from corral.spec.sweep import SweepSpec
from corral.store.records import RunRecord, SweepRecord, TrialRecord

ADVANCE_EVERY_S = 0.5
#: a trial's run ended so: its trial's state (a pruned trial stays pruned)
_ENDED = {"SUCCEEDED": "complete", "FAILED": "failed", "CANCELLED": "failed", "STOPPED": "stopped"}
#: below this many dollars left, no trial starts
MIN_TRIAL_USD = 0.01


def override_value(value: Any) -> str:
    """A parameter's value as a ``--set`` override writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def trial_spec(job: Mapping[str, Any], params: Mapping[str, Any], cap: float | None) -> JobSpec:
    """The job spec with the trial's ``params`` set (``--set`` paths) and its budget capped at
    ``cap``; SpecError naming a path the job spec does not have."""
    sets = [f"{path}={override_value(v)}" for path, v in params.items()]
    data = apply_overrides(dict(job), sets, JobSpec, Locator("<sweep parameters>"))
    if cap is not None:
        budget = dict(data.get("budget") or {})
        current = budget.get("max_cost_usd")
        budget["max_cost_usd"] = round(cap if current is None else min(current, cap), 6)
        data["budget"] = budget
    return JobSpec.model_validate(data)


def _progress(ctx: Context, run: RunRecord) -> list[dict[str, Any]]:
    """Each stage's progress as the run's agent last showed it (its attempt's status)."""
    if not run.attempt:
        return []
    try:
        status = (ctx.store.get_attempt(run.id, run.attempt).data or {}).get("status")
    except Exception:
        return []
    stages = (status or {}).get("stages") or []
    found = [s.get("progress") for s in stages if isinstance(s, dict)]
    return [p for p in found if isinstance(p, dict)]


def reading(ctx: Context, run: RunRecord, metric: str) -> tuple[int, float] | None:
    """(step, value) of ``metric`` the run's agent last showed (any stage; the one with the
    highest step), or None."""
    best: tuple[int, float] | None = None
    for progress in _progress(ctx, run):
        if not isinstance(progress.get("step"), int):
            continue
        value = progress.get("loss") if metric == "loss" else None
        metrics = progress.get("metrics")
        if value is None and isinstance(metrics, dict):
            value = metrics.get(metric)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value) and (best is None or progress["step"] >= best[0]):
            best = (int(progress["step"]), float(value))
    return best


def value_at(trial: TrialRecord, step: int) -> float | None:
    """The trial's reported value at the latest step at or before ``step``."""
    found = [(int(s), v) for s, v in trial.intermediate.items() if int(s) <= step]
    return max(found)[1] if found else None


def best_trial(spec: SweepSpec, trials: list[TrialRecord]) -> TrialRecord | None:
    done = [t for t in trials if t.state == "complete" and t.value is not None]
    if not done:
        return None
    sign = 1.0 if spec.metric.goal == "minimize" else -1.0
    return min(done, key=lambda t: (sign * float(t.value or 0.0), t.number))


class Sweeper:
    """Advances the active sweeps (see the module's docstring); one per controller."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._next = 0.0
        self.active = 0
        #: per active sweep, its trials' runs already seen ended (an ended run never changes:
        #: it is not read again, so a sweep of thousands of trials costs its live ones only)
        self._ended: dict[str, dict[str, RunRecord]] = {}

    def advance(self, force: bool = False) -> int:
        """Advance every active sweep (at most every ADVANCE_EVERY_S); how many are active."""
        now = time.monotonic()
        if not force and now < self._next:
            return self.active
        self._next = now + ADVANCE_EVERY_S
        try:
            sweeps = self.ctx.store.sweeps(active_only=True)
        except Exception as e:  # the store failed: the next read tries again
            log.error("sweeps: %s", e)
            return self.active
        for sweep in sweeps:
            try:
                advance_sweep(self.ctx, sweep, self._ended.setdefault(sweep.name, {}))
            except Exception as e:  # one sweep's trouble never stops the others
                log.error("sweep %s: %s", sweep.name, e)
        for name in set(self._ended) - {s.name for s in sweeps}:
            del self._ended[name]
        self.active = len(sweeps)
        return self.active


def advance_sweep(
    ctx: Context, sweep: SweepRecord, ended: dict[str, RunRecord] | None = None
) -> None:
    """One look at a sweep: its trials synced with their runs, bad ones pruned, new ones
    started, the sweep ended when all are done. ``ended``: runs already seen ended (read once,
    kept by the caller across looks)."""
    spec = SweepSpec.model_validate(sweep.sweep)
    store = ctx.store
    trials = store.trials(sweep.name)
    known = {} if ended is None else ended
    runs = {}
    for t in trials:
        run = known.get(t.run_id) or store.get_run(t.run_id, with_spec=False)
        runs[t.number] = run
    for t in trials:
        _sync(ctx, spec, t, runs[t.number])
        if runs[t.number].terminal:
            known[t.run_id] = runs[t.number]  # synced with its final state: never read again
    for t in trials:
        _sync(ctx, spec, t, runs[t.number])
    trials = store.trials(sweep.name)
    if spec.prune.pruner != "none":
        for t in trials:
            if t.state == "running" and not runs[t.number].terminal:
                _maybe_prune(ctx, spec, sweep, t, trials)
        trials = store.trials(sweep.name)
    _warn_no_metric(ctx, spec, sweep, trials, runs)
    # a pruned trial bills until its run has stopped: it counts as running until then
    running = [t for t in trials if t.number in runs and not runs[t.number].terminal]
    spent = sum(t.cost_usd for t in trials)
    state = sweep.state
    if state == "RUNNING":
        why = _over(spec, sweep, ctx, spent)
        if why:
            store.update_sweep(sweep.name, expect=("RUNNING",), state="STOPPING", reason=why)
    sweep = store.get_sweep(sweep.name)  # as this advance left it (or another controller)
    state = sweep.state
    if state == "STOPPING":
        for t in running:
            if runs[t.number].requested_action is None:
                _stop(ctx, runs[t.number])
    if state == "RUNNING":
        started = _start(ctx, spec, sweep, trials, running, spent)
        if started:
            return
        sweep = store.get_sweep(sweep.name)  # _start may have stopped it (the budget)
        state = sweep.state
    if running:
        return
    best = best_trial(spec, store.trials(sweep.name))
    final = "STOPPED" if state == "STOPPING" else "FINISHED"
    reason = sweep.reason if state == "STOPPING" else "every trial done"
    if state != "STOPPING" and sweep.reason.startswith("warning:"):
        reason += "; " + sweep.reason  # the warning stays with the finished sweep
    done = store.update_sweep(
        sweep.name,
        expect=(state,),
        state=final,
        reason=reason,
        finished_at=ctx.clock(),
        best_trial=best.number if best else None,
    )
    if done is None:
        return  # another controller ended it
    log.info("sweep %s %s (best trial: %s)", sweep.name, final, best.number if best else "-")
    _announce(ctx, sweep, final, best)


def _announce(ctx: Context, sweep: SweepRecord, state: str, best: TrialRecord | None) -> None:
    """A ``sweep.finished`` event on the best trial's run (else the last trial's), which the
    job's webhooks that want it deliver."""
    trials = ctx.store.trials(sweep.name)
    host = best or (trials[-1] if trials else None)
    if host is None:
        return
    data = {
        "sweep": sweep.name,
        "state": state,
        "trials": len(trials),
        "spent_usd": round(sum(t.cost_usd for t in trials), 6),
        "best_trial": best.number if best else None,
        "best_value": best.value if best else None,
        "best_params": dict(best.params) if best else None,
    }
    said = (
        f", best trial {best.number} ({best.value:.6g})" if best and best.value is not None else ""
    )
    ctx.store.add_event(
        host.run_id, "sweep.finished", f"sweep {sweep.name} {state.lower()}{said}", data=data
    )


def _sync(ctx: Context, spec: SweepSpec, t: TrialRecord, run: RunRecord) -> None:
    fields: dict[str, Any] = {}
    got = reading(ctx, run, spec.metric.name) if t.state == "running" else None
    if got is not None:
        step, value = got
        if t.intermediate.get(str(step)) != value or t.value != value:
            fields.update(intermediate={**t.intermediate, str(step): value}, step=step, value=value)
    if run.cost_usd != t.cost_usd:
        fields["cost_usd"] = run.cost_usd
    if run.terminal and t.state == "running":
        state = _ENDED.get(run.state, "failed")
        if state == "complete" and (fields.get("value", t.value) is None):
            state = "failed"  # it reported no metric: nothing to compare
        fields["state"] = state
    if fields:
        ctx.store.update_trial(t.sweep, t.number, **fields)


#: trials that must have ended, none with the metric, before the sweep says so
NO_METRIC_AFTER = 2


def _warn_no_metric(
    ctx: Context,
    spec: SweepSpec,
    sweep: SweepRecord,
    trials: list[TrialRecord],
    runs: Mapping[int, RunRecord],
) -> None:
    """Once ``NO_METRIC_AFTER`` trials ended and none reported the metric, say so once: in the
    sweep's reason (``corral sweep status``), the controller's log and a ``sweep.warning``
    event on the last ended trial's run, naming what the trials do report."""
    ended = [t for t in trials if runs[t.number].terminal]
    if len(ended) < NO_METRIC_AFTER or any(t.value is not None for t in trials):
        return
    if sweep.reason.startswith("warning:"):
        return
    seen: set[str] = set()
    for t in ended:
        seen.update(_reported(ctx, runs[t.number]))
    told = f"; the trials report: {', '.join(sorted(seen))}" if seen else "; they report nothing"
    text = (
        f"warning: no trial has reported the metric {spec.metric.name!r} ({len(ended)} ended){told}"
    )
    if ctx.store.update_sweep(sweep.name, expect=("RUNNING",), reason=text) is None:
        return
    log.warning("sweep %s: %s", sweep.name, text)
    ctx.store.add_event(ended[-1].run_id, "sweep.warning", text, data={"sweep": sweep.name})


def _reported(ctx: Context, run: RunRecord) -> set[str]:
    """The metric names the run's agent last showed (``loss`` included when it had one)."""
    names: set[str] = set()
    for progress in _progress(ctx, run):
        if progress.get("loss") is not None:
            names.add("loss")
        if isinstance(progress.get("metrics"), dict):
            names.update(str(k) for k in progress["metrics"])
    return names


def _stop(ctx: Context, run: RunRecord) -> None:
    try:
        ctx.store.request_action(run.id, "stop")
    except Exception as e:  # it ended meanwhile
        log.info("run %s: %s", run.id, e)


def _over(spec: SweepSpec, sweep: SweepRecord, ctx: Context, spent: float) -> str | None:
    hours = spec.budget.max_hours
    if hours and (ctx.clock() - sweep.created_at).total_seconds() >= hours * 3600:
        return f"budget: {hours:g} h since the launch"
    cap = spec.budget.max_cost_usd
    if cap and spent >= cap - MIN_TRIAL_USD:
        return f"budget: ${spent:.2f} of ${cap:.2f} spent"
    return None


# --- pruning and sampling (Optuna) -------------------------------------------------------


def _optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _distributions(spec: SweepSpec) -> dict[str, Any]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, Any] = {}
    for path, p in spec.parameters.items():
        if p.values is not None:
            out[path] = CategoricalDistribution(list(p.values))
        elif p.int_:
            out[path] = IntDistribution(int(p.low or 0), int(p.high or 0), log=p.log)
        else:
            out[path] = FloatDistribution(float(p.low or 0), float(p.high or 0), log=p.log)
    return out


def _study(spec: SweepSpec, trials: list[TrialRecord], number: int, step: int | None) -> Any:
    """An in-memory Optuna study holding the sweep's trials (with their values at ``step``
    when given: the pruner compares at one step)."""
    optuna = _optuna()
    from optuna.trial import TrialState, create_trial

    seed = spec.seed * 100_003 + number
    if spec.search == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        startup = max(1, min(10, spec.max_trials // 4))
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
    pruner = optuna.pruners.MedianPruner(
        n_startup_trials=spec.prune.min_trials, n_warmup_steps=spec.prune.warmup_steps
    )
    study = optuna.create_study(direction=spec.metric.goal, sampler=sampler, pruner=pruner)
    dists = _distributions(spec)
    for t in trials:
        params = {k: v for k, v in t.params.items() if k in dists}
        if len(params) != len(dists):
            continue
        inter = {int(s): float(v) for s, v in t.intermediate.items()}
        if step is not None:
            at = value_at(t, step)
            inter = {step: at} if at is not None else {}
        if t.state == "complete" and t.value is not None:
            kind, value = TrialState.COMPLETE, t.value
        elif t.state == "running":
            kind, value = TrialState.RUNNING, None
        elif t.state == "pruned":
            kind, value = TrialState.PRUNED, None
        else:
            kind, value = TrialState.FAIL, None
        study.add_trial(
            create_trial(
                params=params,
                distributions=dists,
                value=value,
                state=kind,
                intermediate_values=inter,
            )
        )
    return study


def _maybe_prune(
    ctx: Context, spec: SweepSpec, sweep: SweepRecord, t: TrialRecord, trials: list[TrialRecord]
) -> None:
    if t.step is None or t.value is None or t.step < spec.prune.warmup_steps:
        return
    finished = [x for x in trials if x.state == "complete" and x.value is not None]
    if len(finished) < spec.prune.min_trials:
        return
    others = [x for x in trials if x.number != t.number]
    study = _study(spec, others, t.number, t.step)
    from optuna.trial import TrialState, create_trial

    dists = _distributions(spec)
    study.add_trial(
        create_trial(
            params={k: v for k, v in t.params.items() if k in dists},
            distributions=dists,
            state=TrialState.RUNNING,
            intermediate_values={t.step: t.value},
        )
    )
    frozen = study.get_trials(deepcopy=False)[-1]
    if not study.pruner.prune(study, frozen):
        return
    ctx.store.update_trial(sweep.name, t.number, state="pruned")
    ctx.store.add_event(
        t.run_id,
        "sweep.pruned",
        f"pruned: {spec.metric.name} {t.value:.4g} at step {t.step} is worse than the median "
        "of the finished trials there",
        data={"sweep": sweep.name, "trial": t.number, "step": t.step, "value": t.value},
    )
    _stop(ctx, ctx.store.get_run(t.run_id, with_spec=False))


def _grid_next(spec: SweepSpec, trials: list[TrialRecord]) -> dict[str, Any] | None:
    used = {tuple(sorted((k, repr(v)) for k, v in t.params.items())) for t in trials}
    paths = list(spec.parameters)
    for combo in itertools.product(*(spec.parameters[p].values or [] for p in paths)):
        params = dict(zip(paths, combo, strict=True))
        if tuple(sorted((k, repr(v)) for k, v in params.items())) not in used:
            return params
    return None


def _expected_cost(trials: list[TrialRecord], job: Mapping[str, Any]) -> float | None:
    done = [t.cost_usd for t in trials if t.state in ("complete", "pruned") and t.cost_usd > 0]
    if done:
        return sum(done) / len(done)
    cap = (job.get("budget") or {}).get("max_cost_usd")
    return float(cap) if isinstance(cap, int | float) else None


def _start(
    ctx: Context,
    spec: SweepSpec,
    sweep: SweepRecord,
    trials: list[TrialRecord],
    running: list[TrialRecord],
    spent: float,
) -> bool:
    """Start the trials that fit now; whether the sweep has more to do (a trial started, or
    one may start later)."""
    number = len(trials)
    if number >= spec.max_trials:
        return False
    if len(running) >= spec.max_parallel:
        return True
    cap: float | None = None
    if spec.budget.max_cost_usd:
        reserved = 0.0
        for t in running:
            run_cap = ((ctx.store.get_run(t.run_id).spec or {}).get("budget") or {}).get(
                "max_cost_usd"
            )
            reserved += max(0.0, float(run_cap or 0.0) - t.cost_usd)
        cap = spec.budget.max_cost_usd - spent - reserved
        expected = _expected_cost(trials, sweep.job)
        if cap < MIN_TRIAL_USD or (expected is not None and cap < expected):
            if running:
                return True  # a running trial may end under its cap and leave room
            ctx.store.update_sweep(
                sweep.name,
                expect=("RUNNING",),
                state="STOPPING",
                reason=f"budget: ${max(cap, 0):.2f} left, less than a trial is expected to cost"
                + (f" (${expected:.2f})" if expected is not None else ""),
            )
            return False
    if spec.search == "grid":
        params = _grid_next(spec, trials)
        if params is None:
            return bool(running)
    else:
        study = _study(spec, trials, number, None)
        params = dict(study.ask(_distributions(spec)).params)
    job_spec = trial_spec(sweep.job, params, cap)
    run_id = ctx.store.start_trial(
        sweep.name,
        number,
        params=params,
        spec=job_spec.model_dump(mode="json"),
        spec_hash=spec_hash(job_spec),
        spec_path=sweep.spec_path,
        workdir=str(job_spec.workdir),
        owner=sweep.owner,
        project=job_spec.project,
    )
    if run_id is not None:
        log.info("sweep %s: trial %d started as %s with %s", sweep.name, number, run_id, params)
    return True
