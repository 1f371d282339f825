"""Submitting a run: what ``corral launch`` does before it starts following the run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from corral import paths
from corral.control import launching, planner, transitions
from corral.control.context import Context
from corral.control.providers import load_providers
from corral.control.transitions import Transition
from corral.errors import BadInput, CorralError, InfeasibleRequest
from corral.notify import formats
from corral.providers.base import Offer, Provider
from corral.secrets import resolve_many
from corral.service import caps, paid_defaults
from corral.service._store import using
from corral.service.feasibility import launch_plan, refusal
from corral.spec import JobSpec, load_spec, load_spec_text, spec_hash
from corral.store import Store
from corral.store.records import RunRecord

if TYPE_CHECKING:
    from corral.control.client_code import ClientCode
    from corral.control.shipping import Packed
    from corral.service.submission import BudgetWarning, Submission

# What is only needed once the first attempt is launched (the controller's start, the
# returned values), or only for a machine that does not share this one's files (packing the
# code), is imported when it is needed, inside submit_run: the path from
# ``corral launch`` to the first line of user code pays only for what it needs
# (benchmarks/launch_overhead.py; each frozen dataclass costs a few million instructions to
# create at import).

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
    from corral.service.submission import BudgetWarning  # see the note at the top

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


def start_first_attempt(ctx: Context, run: RunRecord, planned: planner.Plan | None = None) -> None:
    """Plan (unless ``planned``: the plan just made for the run's spec), claim and launch the
    first attempt of the PENDING ``run`` now, as the controller's next tick would
    (``corral.control.controller.start_attempt``).

    A launch that can never succeed asks to be followed to the run's end at once
    (``Transition.follow``): only then are the controller's state handlers imported and
    run. Importing them up front would put the whole controller (watchers, monitor,
    finishing) on the path from ``corral launch`` to the first line of user code."""
    step = launching.next_attempt(ctx, run, planned)
    if isinstance(step, Transition) and step.follow:
        from corral.control.controller import carry_out  # start-up speed (see above)

        carry_out(ctx, run, step)
    else:
        transitions.apply(ctx, run, step)


def ships_code(providers: Mapping[str, Provider], offers: Iterable[Offer]) -> bool:
    """Whether one of the providers of ``offers`` runs jobs on machines that do not share
    this one's files (its node profile names a workdir of its own)."""
    seen: set[str] = set()
    for offer in offers:
        if offer.provider in seen or offer.provider not in providers:
            continue
        seen.add(offer.provider)
        try:
            if providers[offer.provider].node_profile(offer, "submit").workdir:
                return True
        except CorralError:
            return True
    return False


def packed_notice(packed: Packed) -> str:
    mb = packed.size / 1e6
    if packed.source == "git":
        text = f"code: git {packed.git_url} at {(packed.git_commit or '')[:12]}"
        return text + (f" (+ {mb:.1f} MB of files/changes)" if packed.sha256 else "")
    reused = ", unchanged: not packed again" if packed.cached else ""
    origin = ""
    if packed.local_commit:
        origin = f" from commit {packed.local_commit[:12]}"
        if packed.local_dirty:
            origin += " + uncommitted changes (shipped as they are; the manifest says so)"
    return (
        f"code: workdir, {packed.members} files, {packed.content_bytes / 1e6:.1f} MB -> "
        f"{mb:.1f} MB packed{reused}{origin}"
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
    progress: Callable[[int, int], None] | None = None,
    client_code: ClientCode | None = None,
    owner: str | None = None,
) -> Submission:
    """Validate the spec (see :func:`load`), check its workdir and that every secret it names
    resolves, check that an enabled provider can run it, then create the run, launch its
    first attempt and make sure a background controller babysits it (``start_controller``).

    Nothing is recorded when a check fails: BadInput / SpecError / NotFound for the spec,
    InfeasibleRequest naming each provider's reason when none can run it. ``providers``
    replaces the enabled ones (``CORRAL_PROVIDERS``) for the plan and the first launch; the
    controller always uses the enabled ones. ``progress(done, total)`` follows the packing of
    the code for a machine that does not share this one's files. ``client_code``: the code a
    remote CLI packed and uploaded (:mod:`corral.control.client_code`); the workdir then need
    not exist here, unless a provider that runs jobs on this machine's own disk is to run it.
    ``owner``: who launches (a team server's token name; default ``CORRAL_USER`` or the
    login name), what per-user spending caps count; a launch that would pass a cap
    (:mod:`corral.service.caps`) is refused with nothing recorded."""
    spec, source = load(path, text=text, base_dir=base_dir, overrides=overrides)
    workdir_here = Path(spec.workdir).is_dir()
    if not workdir_here and client_code is None:
        raise BadInput(f"{source}: workdir {spec.workdir} does not exist or is not a directory")
    formats.check(spec)  # a webhook payload format the sender knows
    # every secret must resolve before anything is created or launched; resolved once, here,
    # and handed to the first attempt with the spec and the plan (a launch decides once)
    secrets = resolve_many(spec.secrets) if spec.secrets else {}
    skipped: dict[str, str] = {}
    if providers is None:
        providers, skipped = load_providers()
    result = launch_plan(spec, providers=providers, skipped=skipped)
    refused = refusal(result, source)
    if refused:
        raise InfeasibleRequest(refused)
    from corral.spec.advice import spec_warnings  # small: no cost to the launch

    notices: list[str] = [f"warning: {w}" for w in spec_warnings(spec)]
    # a paid run without a cap or an idle stop gets the default ones (said at launch)
    offers = result.available or result.offers
    spec, budget = paid_defaults.choose(spec, offers)
    if budget.notice():
        notices.append(str(budget.notice()))
    spec, idle_notice = paid_defaults.choose_idle(spec, offers)
    if idle_notice:
        notices.append(idle_notice)
    # code for machines that do not share this one's files: packed now, so a workdir over
    # code.max_size is refused before anything is created or rented
    packed = None
    if ships_code(providers, result.available or result.offers):
        from corral.control import shipping  # only for such machines (see the note at the top)

        if client_code is not None:
            from corral.control.client_code import packed_from_client

            packed = packed_from_client(spec, paths.home(), client_code, source)
        else:
            packed = shipping.pack(spec, paths.home(), progress, source=source)
        notices += list(packed.warnings)
        notices.append(packed_notice(packed))
    elif not workdir_here:
        raise BadInput(
            f"{source}: workdir {spec.workdir} is not on the server, and the providers that "
            "can run the job run it on the server's own disk: launch from a directory the "
            "server sees too, or enable a provider whose machines get the code shipped"
        )
    if owner is None:
        owner = caps.launcher()
    with using(store) as st:
        expected, why = caps.expected_cost(spec, offers)
        caps.check_launch(st, owner=owner, project=spec.project, expected_usd=expected, why=why)
        run = st.create_run(
            name=spec.name,
            spec=spec.model_dump(mode="json"),
            spec_hash=spec_hash(spec),
            spec_path=str(Path(path).resolve()) if path is not None else source,
            workdir=str(spec.workdir),
            owner=owner,
            project=spec.project,
        )
        if budget.source in ("default", "opted out"):
            st.add_event(run.id, paid_defaults.BUDGET_SET, str(budget.notice()), data=budget.data())
        if packed is not None:
            shipping.record(st, run.id, packed)
        # launch the first attempt here (the fast path to the first line of user code), then
        # make sure a controller babysits it; the compare-and-set in start_attempt means the
        # two never both launch it
        ctx = Context(store=st, providers=providers, secrets=secrets)
        ctx.remember_spec(run, spec)
        start_first_attempt(ctx, run, result)
        # imported only now (see the note at the top)
        from corral.service.controller import ensure_controller
        from corral.service.run_view import RunView
        from corral.service.submission import Submission

        if start_controller:
            ensure_controller(wait_s=0, notify=notices.append)
        run = st.get_run(run.id)
    warning = budget_warning(spec, result.available or result.offers)
    return Submission(run=RunView.of(run), warnings=[warning] if warning else [], notices=notices)
