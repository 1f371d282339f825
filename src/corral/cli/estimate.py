"""``corral estimate FILE``: what a job would cost on each offer that fits it, on-demand and
spot side by side, before anything is launched.

Cost = price per hour x the run's hours (``--hours``, else ``limits.max_runtime``). Offers are
gathered for the job's hardware, regions and providers but regardless of ``resources.spot`` and
``max_hourly_price``, so both kinds show up; an offer those settings rule out, or whose cost is
over ``budget.max_cost_usd``, is flagged rather than hidden. The offer a launch would take now
(the cheapest available one within every limit) is marked.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer

#: flags of one side (on-demand or spot) of a row
OVER_BUDGET = "over_budget"
OVER_MAX_PRICE = "over_max_hourly_price"
SPOT_SETTING = "excluded_by_resources_spot"
UNAVAILABLE = "unavailable"


def machine_of(offer: Any) -> str:
    """What pairs a spot offer with its on-demand twin: the provider's machine name
    (``details["machine"]``), else the hardware."""
    name = offer.details.get("machine") if offer.details else None
    if name:
        return str(name)
    mem = f"{offer.memory_gb:g}GB" if offer.memory_gb is not None else "?"
    cpus = f"{offer.cpus:g}cpu" if offer.cpus is not None else "?"
    return f"{offer.gpu_type or 'gpu'}x{offer.gpu_count}/{cpus}/{mem}"


def pair_offers(offers: Iterable[Any]) -> list[dict[str, Any]]:
    """Rows of ``{"provider", "region", "machine", "on_demand": Offer|None, "spot":
    Offer|None}``: one per machine kind of a provider in a region, its spot and on-demand
    offers side by side (an offer whose side is already taken starts a row of its own)."""
    rows: list[dict[str, Any]] = []
    index: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for o in offers:
        key = (o.provider, o.region, machine_of(o))
        side = "spot" if o.spot else "on_demand"
        row = next((r for r in index.get(key, []) if r[side] is None), None)
        if row is None:
            row = {"provider": key[0], "region": key[1], "machine": key[2]}
            row.update(on_demand=None, spot=None)
            rows.append(row)
            index.setdefault(key, []).append(row)
        row[side] = o
    return rows


def _side(offer: Any, hours: float, spec: Any, chosen: Any) -> dict[str, Any]:
    price = offer.price_per_hour
    cost = price * hours
    res, budget = spec.resources, spec.budget.max_cost_usd
    flags = []
    if res.max_hourly_price is not None and price > res.max_hourly_price:
        flags.append(OVER_MAX_PRICE)
    if budget is not None and cost > budget:
        flags.append(OVER_BUDGET)
    if isinstance(res.spot, bool) and offer.spot != res.spot:
        flags.append(SPOT_SETTING)
    if not offer.available:
        flags.append(UNAVAILABLE)
    return {
        "offer_id": offer.offer_id,
        "price_per_hour": price,
        "cost_usd": round(cost, 6),
        "available": offer.available,
        "availability": offer.availability,
        "catalog_date": offer.catalog_date,
        "flags": flags,
        "budget_stop_after_h": round(budget / price, 3) if OVER_BUDGET in flags else None,
        "chosen": offer is chosen,
    }


def _row_order(row: dict[str, Any]) -> tuple:
    sides = [s for s in (row["on_demand"], row["spot"]) if s is not None]
    available = [s for s in sides if s["available"]]
    cheapest = min(s["cost_usd"] for s in (available or sides))
    return (not available, cheapest, row["provider"], row["region"], row["machine"])


def hours_for(spec: Any, hours: float | None) -> tuple[float, str]:
    """(hours, where they come from): ``--hours``, else ``limits.max_runtime``."""
    from corral.errors import BadInput

    if hours is not None:
        if not hours > 0:
            raise BadInput(f"--hours {hours:g}: expected a number of hours above 0")
        return float(hours), "--hours"
    if spec.limits.max_runtime:
        return spec.limits.max_runtime / 3600.0, "limits.max_runtime"
    raise BadInput("the spec has no limits.max_runtime: give the expected run time with --hours")


def compute(file: Path, *, hours: float | None = None, overrides: Iterable[str] = ()) -> dict:
    """Everything ``corral estimate`` shows, as a JSON-ready dict (see ``--json``)."""
    from corral.cli.offers import choose_providers, provider_rows
    from corral.control import planner
    from corral.spec import load_spec

    spec = load_spec(file, list(overrides))
    run_hours, source = hours_for(spec, hours)
    req = planner.requirements_from_spec(spec)
    wide = req.model_copy(update={"spot": None, "max_hourly_price": None})
    loaded, skipped = choose_providers([])
    result = planner.plan(loaded, wide)
    limits = planner.Limits(req)
    chosen = next((o for o in result.offers if o.available and limits.misfit(o) is None), None)
    rows = []
    for pair in pair_offers(result.offers):
        od, sp = pair["on_demand"], pair["spot"]
        any_offer = od or sp
        row = {k: pair[k] for k in ("provider", "region", "machine")}
        row["gpu_type"], row["gpu_count"] = any_offer.gpu_type, any_offer.gpu_count
        row["on_demand"] = _side(od, run_hours, spec, chosen) if od else None
        row["spot"] = _side(sp, run_hours, spec, chosen) if sp else None
        saving = None
        if od and sp and od.price_per_hour > 0:
            saving = round(1 - sp.price_per_hour / od.price_per_hour, 4)
        row["spot_saving"] = saving
        rows.append(row)
    rows.sort(key=_row_order)
    names = list(loaded) + [n for n in skipped if n not in loaded]
    return {
        "name": spec.name,
        "hours": run_hours,
        "hours_from": source,
        "budget_usd": spec.budget.max_cost_usd,
        "max_hourly_price": spec.resources.max_hourly_price,
        "spot": spec.resources.spot,
        "chosen": None
        if chosen is None
        else {
            "provider": chosen.provider,
            "region": chosen.region,
            "machine": machine_of(chosen),
            "offer_id": chosen.offer_id,
            "spot": chosen.spot,
            "price_per_hour": chosen.price_per_hour,
            "cost_usd": round(chosen.price_per_hour * run_hours, 6),
        },
        "rows": rows,
        "providers": provider_rows(result, skipped, names),
    }


def estimate(
    file: Path = typer.Argument(..., help="The job spec (a directory means its corral.yaml)."),
    hours: float = typer.Option(
        None, "--hours", help="Expected run time in hours. Default: limits.max_runtime."
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a spec key first, e.g. --set resources.gpus=A100:2."
    ),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Estimate the cost of a job on each offer that fits it (USD: price per hour x hours),
    on-demand and spot side by side; offers over budget.max_cost_usd or
    resources.max_hourly_price are flagged."""
    data = compute(file, hours=hours, overrides=set_)
    if json_:
        from corral.cli.output import print_json

        print_json(data)
        return
    _print(data)


#: one-letter marks after a cost, explained under the table
_MARKS = {
    OVER_BUDGET: ("b", "over budget.max_cost_usd"),
    OVER_MAX_PRICE: ("p", "over resources.max_hourly_price"),
    SPOT_SETTING: ("x", "ruled out by resources.spot"),
    UNAVAILABLE: ("n", "no capacity now"),
}
_CHOSEN = ("*", "what a launch would take now")


def _cells(side: dict[str, Any] | None, seen: dict[str, str]) -> tuple[str, str]:
    """(price, cost + marks) of one side of a row; ``seen`` collects the marks used."""
    if side is None:
        return "-", "-"
    from corral.cli.output import fmt_cost

    marks = [_MARKS[f] for f in side["flags"]]
    if side["chosen"]:
        marks.insert(0, _CHOSEN)
    seen.update(marks)
    text = f"{fmt_cost(side['cost_usd'])} {''.join(m for m, _ in marks)}".rstrip()
    price = f"{side['price_per_hour']:.3f}"
    if side["chosen"]:
        return f"[bold green]{price}[/]", f"[bold green]{text}[/]"
    if OVER_BUDGET in side["flags"] or OVER_MAX_PRICE in side["flags"]:
        return price, f"[red]{text}[/]"
    return price, text if side["available"] else f"[dim]{text}[/]"


def _print(data: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from corral.cli.offers import gpu_text
    from corral.cli.output import console, fmt_cost

    limits = [f"{data['hours']:g} h ({data['hours_from']})"]
    if data["budget_usd"] is not None:
        limits.append(f"budget {fmt_cost(data['budget_usd'])}")
    if data["max_hourly_price"] is not None:
        limits.append(f"max ${data['max_hourly_price']:g}/h")
    limits.append(f"spot: {str(data['spot']).lower()}")
    console.print(f"[bold]{escape(data['name'])}[/]: " + ", ".join(limits) + "; OD = on-demand")
    if data["rows"]:
        seen: dict[str, str] = {}
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("PROVIDER", "REGION", "MACHINE", "GPUS"):
            t.add_column(col)
        for col in ("OD $/H", "OD COST", "SPOT $/H", "SPOT COST", "SAVE"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in data["rows"]:
            saving = "-" if r["spot_saving"] is None else f"{r['spot_saving']:.0%}"
            t.add_row(
                r["provider"],
                r["region"],
                escape(r["machine"]),
                gpu_text(r),
                *_cells(r["on_demand"], seen),
                *_cells(r["spot"], seen),
                saving,
            )
        console.print(t)
        if seen:
            legend = [(m, why) for m, why in (_CHOSEN, *_MARKS.values()) if m in seen]
            console.print("[dim]" + "; ".join(f"{m} {why}" for m, why in legend) + "[/]")
    else:
        console.print("no offer fits this job")
    chosen = data["chosen"]
    if chosen:
        kind = "spot" if chosen["spot"] else "on-demand"
        console.print(
            f"launch would take {chosen['provider']}/{chosen['region']} {escape(chosen['machine'])}"
            f" {kind} at ${chosen['price_per_hour']:g}/h: {fmt_cost(chosen['cost_usd'])}"
        )
    else:
        console.print("[yellow]no available offer is within every limit: a launch would wait[/]")
    for p in data["providers"]:
        if p["reason"]:
            console.print(f"  [dim]{p['provider']}: {escape(p['reason'])}[/]")
