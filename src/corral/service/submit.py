"""Submitting a run: what ``corral launch`` does before it starts following the run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from corral.control import controller
from corral.control.context import Context
from corral.control.providers import load_providers
from corral.errors import BadInput, InfeasibleRequest
from corral.providers.base import Offer, Provider
from corral.secrets import resolve_many
from corral.service._store import using
from corral.service.controller import ensure_controller
from corral.service.feasibility import launch_plan, refusal
from corral.service.views import BudgetWarning, RunView, Submission
from corral.spec import JobSpec, load_spec, load_spec_text, spec_hash
from corral.store import Store

#: the label of a spec given as text, in errors and as the run's ``spec_path``
TEXT_SOURCE = "<string>"


def load(
    path: str | Path | None = None,
    *,
    text: str | None = None,
    base_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> tuple[JobSpec, str]:
    """(the validated spec, its source) from exactly one of ``path`` (a file, or a directory
    holding ``corral.yaml``) or ``text`` (relative paths resolve against ``base_dir``, default
    the current directory), with ``overrides`` (``key.path=value``) applied."""
    if (path is None) == (text is None):
        raise BadInput("give the spec either as a file path or as text, not both or neither")
    if path is not None:
        return load_spec(path, list(overrides)), str(path)
    assert text is not None
    return load_spec_text(text, base_dir=base_dir, overrides=list(overrides)), TEXT_SOURCE


def budget_warning(spec: JobSpec, offers: Sequence[Offer]) -> BudgetWarning | None:
    """A warning (not a refusal) when the cheapest offer for the whole ``limits.max_runtime``
    costs more than ``budget.max_cost_usd``."""
    cap = spec.budget.max_cost_usd
    hours = (spec.limits.max_runtime or 0) / 3600.0
    if not cap or not hours or not offers:
        return None
    price = offers[0].price_per_hour
    worst = price * hours
    if not price or worst <= cap:
        return None
    return BudgetWarning(
        provider=offers[0].provider,
        price_per_hour=price,
        hours=hours,
        worst_cost_usd=worst,
        budget_usd=cap,
        hours_at_budget=cap / price,
    )


def submit_run(
    path: str | Path | None = None,
    *,
    text: str | None = None,
    base_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    store: Store | None = None,
    providers: dict[str, Provider] | None = None,
    start_controller: bool = True,
) -> Submission:
    """Validate the spec (see :func:`load`), check its workdir and that every secret it names
    resolves, check that an enabled provider can run it, then create the run, launch its
    first attempt and make sure a background controller babysits it (``start_controller``).

    Nothing is recorded when a check fails: BadInput / SpecError / NotFound for the spec,
    InfeasibleRequest naming each provider's reason when none can run it. ``providers``
    replaces the enabled ones (``CORRAL_PROVIDERS``) for the plan and the first launch; the
    controller always uses the enabled ones."""
    spec, source = load(path, text=text, base_dir=base_dir, overrides=overrides)
    if not Path(spec.workdir).is_dir():
        raise BadInput(f"{source}: workdir {spec.workdir} does not exist or is not a directory")
    if spec.secrets:  # every secret must resolve before anything is created or launched
        resolve_many(spec.secrets)
    skipped: dict[str, str] = {}
    if providers is None:
        providers, skipped = load_providers()
    result = launch_plan(spec, providers=providers, skipped=skipped)
    refused = refusal(result, source)
    if refused:
        raise InfeasibleRequest(refused)
    warning = budget_warning(spec, result.available or result.offers)
    notices: list[str] = []
    with using(store) as st:
        run = st.create_run(
            name=spec.name,
            spec=spec.model_dump(mode="json"),
            spec_hash=spec_hash(spec),
            spec_path=str(Path(path).resolve()) if path is not None else source,
            workdir=str(spec.workdir),
        )
        # launch the first attempt here (the fast path to the first line of user code), then
        # make sure a controller babysits it; the compare-and-set in start_attempt means the
        # two never both launch it
        controller.start_attempt(Context(store=st, providers=providers), run)
        if start_controller:
            ensure_controller(wait_s=0, notify=notices.append)
        run = st.get_run(run.id)
    return Submission(run=RunView.of(run), warnings=[warning] if warning else [], notices=notices)
