"""The planner: offers from every enabled provider, filtered by the job's requirements and
sorted cheapest first (available offers before unavailable ones).

Providers are asked in parallel (one thread each: a cloud's offers may take a network round
trip), and one provider's failure never stops the plan: it is recorded in ``Plan.rejected``
with its reason. The filter and the sort are the hot path (tens of thousands of offers across
clouds and regions): they read plain attributes, never validate a model, and sort with a C-level
key, so choosing among 10,000 offers takes a few milliseconds (``benchmarks/planner.py``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from corral.errors import CorralError, InfeasibleRequest, ProviderError
from corral.providers.base import (
    Offer,
    Provider,
    Requirements,
    SupportsGangs,
    SupportsPriceRefresh,
    SupportsVolumes,
    VolumeRequest,
)

if TYPE_CHECKING:  # only a type here: the planner (corral offers) never loads the spec models
    from corral.spec import JobSpec

log = logging.getLogger("corral.control.planner")

#: Most providers asked at once.
MAX_WORKERS = 8


def requirements_from_spec(spec: JobSpec) -> Requirements:
    """Turn ``spec.resources`` into provider-neutral :class:`Requirements`.

    ``spot: auto`` becomes ``spot=None`` (either kind; the cheapest wins)."""
    res = spec.resources
    gpus = res.gpus
    spot = res.spot
    return Requirements(
        gpu_type=getattr(gpus, "type", None) if gpus else None,
        gpu_count_min=gpus.min if gpus else 0,
        gpu_count_max=gpus.max if gpus else 0,
        cpus=res.cpus,
        memory_gb=res.memory,
        disk_gb=res.disk,
        spot=None if spot in (None, "auto") else bool(spot),
        max_hourly_price=res.max_hourly_price,
        providers=list(res.providers) if res.providers else None,
        regions=list(res.regions) if res.regions else None,
        max_runtime_s=getattr(getattr(spec, "limits", None), "max_runtime", None),
        nodes=getattr(res, "nodes", 1),
        image=getattr(spec, "image", None),
        volumes=[
            VolumeRequest(name=v.name, size_gb=math.ceil(v.size), mount=v.mount)
            for v in getattr(spec, "volumes", None) or []
        ],
    )


@dataclass
class Plan:
    offers: list[Offer] = field(default_factory=list)
    #: provider name -> why it cannot serve this job (infeasible, error, excluded)
    rejected: dict[str, str] = field(default_factory=dict)
    #: provider name -> machine code of that reason: ``excluded`` (allow-list), ``no_offer``,
    #: ``no_fit`` (offers, none within the limits), ``unsupported`` (it lacks what the job
    #: needs: volumes, a gang), ``not_available`` (a multi-node job, before corral launches
    #: gangs), ``internal`` (a bug in the provider) or the :class:`CorralError` code it raised (``infeasible``, ``auth_failed``, ...)
    codes: dict[str, str] = field(default_factory=dict)

    @property
    def available(self) -> list[Offer]:
        return [o for o in self.offers if o.available]

    @property
    def cheapest(self) -> Offer | None:
        """The offer a launch tries first: the cheapest available one."""
        return next((o for o in self.offers if o.available), None)

    def reject(self, name: str, reason: str, code: str) -> None:
        self.rejected[name] = reason
        self.codes[name] = code

    def explain(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in sorted(self.rejected.items()))


class Limits:
    """The job's limits on one offer, with the requirements read once (not per offer)."""

    __slots__ = (
        "cpus",
        "gpu_max",
        "gpu_min",
        "gpu_type",
        "max_price",
        "memory",
        "regions",
        "req",
        "spot",
    )

    def __init__(self, req: Requirements):
        self.req = req
        self.max_price = req.max_hourly_price
        self.regions = frozenset(req.regions) if req.regions else None
        self.spot = req.spot
        self.gpu_min = req.gpu_count_min
        self.gpu_max = req.gpu_count_max
        self.gpu_type = req.gpu_type.upper() if req.gpu_type else None
        self.cpus = req.cpus
        self.memory = req.memory_gb

    def misfit(self, o: Offer) -> str | None:
        """None if ``o`` is within the limits, else the first limit it breaks: ``price``,
        ``region``, ``spot``, ``gpu_count``, ``gpu_type``, ``cpus`` or ``memory``."""
        if self.max_price is not None and o.price_per_hour > self.max_price:
            return "price"
        if self.regions is not None and o.region not in self.regions:
            return "region"
        if self.spot is not None and o.spot != self.spot:
            return "spot"
        if o.gpu_count < self.gpu_min or (self.gpu_max and o.gpu_count > self.gpu_max):
            return "gpu_count"
        if self.gpu_type and o.gpu_type and o.gpu_type.upper() != self.gpu_type:
            return "gpu_type"
        if self.cpus is not None and o.cpus is not None and o.cpus < self.cpus:
            return "cpus"
        if self.memory is not None and o.memory_gb is not None and o.memory_gb < self.memory:
            return "memory"
        return None

    def keep(self, offers: Iterable[Offer]) -> list[Offer]:
        misfit = self.misfit
        return [o for o in offers if misfit(o) is None]

    def describe(self, limit: str) -> str:
        """Human words for a limit code of :meth:`misfit`."""
        r = self.req
        if limit == "price":
            return f"over ${r.max_hourly_price:g}/h"
        if limit == "region":
            return f"outside regions {', '.join(r.regions or [])}"
        if limit == "spot":
            return "on-demand (spot only asked)" if r.spot else "spot (on-demand only asked)"
        if limit == "gpu_count":
            n = r.gpu_count_min if r.gpu_count_min == r.gpu_count_max else None
            want = str(n) if n is not None else f"{r.gpu_count_min}..{r.gpu_count_max or 'any'}"
            return f"not {want} GPU(s)"
        if limit == "gpu_type":
            return f"not {r.gpu_type}"
        if limit == "cpus":
            return f"fewer than {r.cpus:g} CPUs"
        return f"less than {r.memory_gb:g} GB of memory"


def fits(offer: Offer, req: Requirements) -> bool:
    """Whether ``offer`` is within ``req``'s limits (price, region, spot, GPUs, CPUs, memory)."""
    return Limits(req).misfit(offer) is None


#: cheapest first; ties broken by provider, region and offer id, so the order is stable
_ORDER = attrgetter("price_per_hour", "provider", "region", "offer_id")


def sort_key(offer: Offer) -> tuple:
    """Available before unavailable, then cheapest first (the order of ``Plan.offers``)."""
    return (not offer.available, *_ORDER(offer))


def sort_offers(offers: Iterable[Offer]) -> list[Offer]:
    """``offers`` in :func:`sort_key` order (faster than ``sorted(key=sort_key)``)."""
    available: list[Offer] = []
    unavailable: list[Offer] = []
    for o in offers:
        (available if o.available else unavailable).append(o)
    available.sort(key=_ORDER)
    unavailable.sort(key=_ORDER)
    available.extend(unavailable)
    return available


def _ask(provider: Provider, req: Requirements) -> list[Offer] | BaseException:
    try:
        return list(provider.offers(req))
    except Exception as exc:  # recorded per provider; one provider never stops the plan
        return exc


def collect(
    providers: Mapping[str, Provider], req: Requirements, workers: int | None = None
) -> dict[str, list[Offer] | BaseException]:
    """Each allowed provider's offers for ``req`` (or the exception it raised), asked in
    parallel. Providers outside ``req.providers`` are not asked."""
    names = [n for n in providers if req.providers is None or n in req.providers]
    if len(names) <= 1 or workers == 1:
        return {n: _ask(providers[n], req) for n in names}
    pool = ThreadPoolExecutor(
        max_workers=min(len(names), workers or MAX_WORKERS), thread_name_prefix="corral-offers"
    )
    try:
        futures = {n: pool.submit(_ask, providers[n], req) for n in names}
        return {n: f.result() for n, f in futures.items()}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _failure(name: str, exc: BaseException) -> tuple[str, str]:
    """(reason, code) for a provider's exception. Only typed corral errors, whose messages
    are written to be shown, are quoted; anything else is named by its type (its text could
    hold a URL or a credential)."""
    if isinstance(exc, InfeasibleRequest):
        return exc.message, exc.code
    if isinstance(exc, ProviderError):
        return f"unavailable ({exc.message})", exc.code
    if isinstance(exc, CorralError):
        return exc.message, exc.code
    log.warning("planner: provider %s failed with %s", name, type(exc).__name__)
    return f"failed unexpectedly ({type(exc).__name__}; a bug in the provider)", "internal"


def _no_fit_reason(offers: list[Offer], limits: Limits) -> str:
    counts = Counter(limits.misfit(o) for o in offers)
    parts = [f"{n} {limits.describe(code)}" for code, n in counts.most_common() if code]
    return f"none of its {len(offers)} offers fits: " + ", ".join(parts)


def _without_volumes(providers: Mapping[str, Provider], req: Requirements) -> dict[str, str]:
    """Providers allowed by ``req`` that cannot mount its named volumes, with why."""
    if not req.volumes:
        return {}
    out = {}
    for name, p in providers.items():
        if isinstance(p, SupportsVolumes) or (req.providers and name not in req.providers):
            continue
        why = type(p).unsupported.get("SupportsVolumes", "not implemented")
        out[name] = f"has no persistent volumes for `volumes:` ({why})"
    return out


def _without_gangs(
    providers: Mapping[str, Provider], req: Requirements
) -> dict[str, tuple[str, str]]:
    """Providers allowed by ``req`` that cannot run its gang of ``req.nodes`` machines, with
    why and its code: ``unsupported`` (no gang there, or not that many nodes) or
    ``not_available`` (the provider can form one, but corral's gang launch there,
    docs/multinode.md, is not built yet, so a multi-node job never runs on one node
    instead)."""
    if req.nodes <= 1:
        return {}
    out = {}
    for name, p in providers.items():
        if req.providers and name not in req.providers:
            continue
        if not isinstance(p, SupportsGangs):
            why = type(p).unsupported.get("SupportsGangs", "not implemented")
            out[name] = (f"cannot give one job {req.nodes} machines ({why})", "unsupported")
        elif req.nodes > p.max_nodes:
            out[name] = (
                f"gives one job at most {p.max_nodes} machines, {req.nodes} asked (resources.nodes)",
                "unsupported",
            )
        elif not p.launches_gangs:
            form = f"; its gang: {p.gang_form}" if p.gang_form else ""
            out[name] = (
                f"multi-node launch is not available yet on {name} ({req.nodes} nodes "
                f"asked{form}; see docs/multinode.md)",
                "not_available",
            )
    return out


def plan(
    providers: Mapping[str, Provider], req: Requirements, *, workers: int | None = None
) -> Plan:
    """Collect, filter and sort offers. Never raises for one provider's failure.

    ``Plan.offers`` holds every offer within ``req``'s limits - the ``providers`` allow-list,
    ``regions``, ``spot`` (None: either), ``max_hourly_price``, GPU type and count, CPUs and
    memory - available ones first, each group cheapest first; ``Plan.cheapest`` is the one a
    launch tries first. Each provider that gives nothing is in ``Plan.rejected`` with why."""
    result = Plan()
    limits = Limits(req)
    unfit = {n: (why, "unsupported") for n, why in _without_volumes(providers, req).items()}
    unfit.update(_without_gangs(providers, req))
    askable = {n: p for n, p in providers.items() if n not in unfit}
    answers = collect(askable, req, workers)
    for name in providers:
        if name in unfit:
            result.reject(name, *unfit[name])
            continue
        if name not in answers:
            result.reject(name, "not in resources.providers", "excluded")
            continue
        answer = answers[name]
        if isinstance(answer, BaseException):
            result.reject(name, *_failure(name, answer))
            continue
        kept = limits.keep(answer)
        if not answer:
            result.reject(name, "no offer for this job", "no_offer")
        elif not kept:
            result.reject(name, _no_fit_reason(answer, limits), "no_fit")
        result.offers.extend(kept)
    result.offers = sort_offers(result.offers)
    return result


def refresh_prices(
    providers: Mapping[str, Provider], workers: int | None = None
) -> dict[str, dict[str, Any]]:
    """Ask every provider that publishes live prices (:class:`SupportsPriceRefresh`) to
    reload them now. Returns, per provider: ``{"refreshed": bool, "prices_as_of": str|None,
    "reason": str}`` (the reason when not refreshed: not supported, or the error)."""
    out: dict[str, dict[str, Any]] = {}
    live = {n: p for n, p in providers.items() if isinstance(p, SupportsPriceRefresh)}
    for name in providers:
        if name not in live:
            out[name] = {
                "refreshed": False,
                "prices_as_of": None,
                "reason": "prices come from its catalog or its offers; nothing to refresh",
            }

    def one(p: SupportsPriceRefresh) -> str | Exception | None:
        try:
            return p.refresh_prices()
        except Exception as exc:
            return exc

    if live:
        with ThreadPoolExecutor(max_workers=min(len(live), workers or MAX_WORKERS)) as pool:
            answers = dict(zip(live, pool.map(one, live.values()), strict=True))
        for name, answer in answers.items():
            if isinstance(answer, BaseException):
                reason, _ = _failure(name, answer)
                out[name] = {"refreshed": False, "prices_as_of": None, "reason": reason}
            else:
                as_of = None if answer is None else str(answer)
                out[name] = {"refreshed": True, "prices_as_of": as_of, "reason": ""}
    return {n: out[n] for n in providers}
