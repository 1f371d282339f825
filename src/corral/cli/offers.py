"""``corral offers``: what the enabled providers would rent out for a GPU request, cheapest
first, unavailable offers last; providers that gave nothing are listed with their reason."""

from __future__ import annotations

from typing import Any

import typer


def parse_gpus(text: str | None) -> tuple[str | None, int, int]:
    """(type, min, max) of a ``--gpus`` value such as ``A100:1``; no value: any machine."""
    if text is None:
        return None, 0, 0
    from corral.errors import BadInput
    from corral.spec import parse_gpu_request

    try:
        parsed = parse_gpu_request(text)
    except ValueError as exc:
        raise BadInput(f"--gpus: {exc}") from None
    return parsed["type"], parsed["min"], parsed["max"]


def choose_providers(names: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The providers named by ``--provider`` (unknown names are bad input), else the enabled
    ones (``CORRAL_PROVIDERS``); and the reasons of those that could not be loaded."""
    from corral.control.providers import load_providers
    from corral.errors import BadInput, CorralError
    from corral.providers.registry import provider_class

    wanted = list(dict.fromkeys(n.strip().lower() for n in names if n.strip()))
    for name in wanted:
        try:
            provider_class(name)
        except BadInput:
            raise
        except CorralError:
            pass  # known but not loadable: listed with its reason by load_providers
    return load_providers(wanted or None)


def provider_rows(result: Any, skipped: dict[str, str], names: list[str]) -> list[dict]:
    """One row per provider asked: how many offers it gave and, if none, why."""
    from collections import Counter

    total = Counter(o.provider for o in result.offers)
    free = Counter(o.provider for o in result.offers if o.available)
    rows = []
    for name in names:
        if name in skipped:
            reason, code = skipped[name], "not_loaded"
        else:
            reason, code = result.rejected.get(name), result.codes.get(name)
        rows.append(
            {
                "provider": name,
                "offers": total[name],
                "available": free[name],
                "reason": reason,
                "code": code,
            }
        )
    rows.sort(key=lambda r: (r["reason"] is not None, r["provider"]))
    return rows


def gather(
    *,
    gpus: str | None = None,
    spot: bool | None = None,
    regions: list[str] | None = None,
    providers: list[str] | None = None,
    max_price: float | None = None,
    refresh: bool = False,
) -> dict[str, Any]:
    """Everything ``corral offers`` shows, as a JSON-ready dict (see ``--json``)."""
    from corral.control import planner
    from corral.errors import BadInput
    from corral.providers.base import Requirements

    if max_price is not None and not max_price > 0:
        raise BadInput(f"--max-price {max_price:g}: expected a price in USD per hour above 0")
    gpu_type, low, high = parse_gpus(gpus)
    loaded, skipped = choose_providers(providers or [])
    names = list(loaded) + [n for n in skipped if n not in loaded]
    refreshed = planner.refresh_prices(loaded) if refresh else None
    req = Requirements(
        gpu_type=gpu_type,
        gpu_count_min=low,
        gpu_count_max=high,
        spot=spot,
        max_hourly_price=max_price,
        regions=list(regions) if regions else None,
    )
    result = planner.plan(loaded, req)
    out: dict[str, Any] = {
        "query": {
            "gpus": gpus,
            "spot": spot,
            "regions": req.regions,
            "providers": names,
            "max_price": max_price,
        },
        "offers": [o.model_dump(mode="json") for o in result.offers],
        "providers": provider_rows(result, skipped, names),
    }
    if refreshed is not None:
        out["refresh"] = refreshed
    return out


def offers(
    gpus: str = typer.Option(
        None,
        "--gpus",
        help="GPUs per machine: 'A100:1', 'L40S:2..4' (a range), 'any:1', '8'. "
        "Default: any machine.",
    ),
    spot: bool = typer.Option(False, "--spot", help="Spot (interruptible) offers only."),
    on_demand: bool = typer.Option(False, "--on-demand", help="On-demand offers only."),
    region: list[str] = typer.Option([], "--region", help="Only this region (repeatable)."),
    provider: list[str] = typer.Option(
        [],
        "--provider",
        help="Only this provider (repeatable). Default: the enabled ones (CORRAL_PROVIDERS).",
    ),
    max_price: float = typer.Option(
        None, "--max-price", help="Highest price for the whole machine, in USD per hour."
    ),
    refresh: bool = typer.Option(
        False, "--refresh", help="Reload live prices first, where a provider publishes them."
    ),
    limit: int = typer.Option(None, "--limit", "-n", help="Show at most this many offers."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List offers of the enabled providers, cheapest first ($/h for the whole machine),
    unavailable ones last, with availability, region, GPUs, spot or on-demand and the date of
    the price data."""
    from corral.errors import BadInput

    if spot and on_demand:
        raise BadInput("--spot and --on-demand exclude each other (give neither for both kinds)")
    if limit is not None and limit < 0:
        raise BadInput(f"--limit {limit}: expected 0 or more")
    data = gather(
        gpus=gpus,
        spot=True if spot else (False if on_demand else None),
        regions=region,
        providers=provider,
        max_price=max_price,
        refresh=refresh,
    )
    data["count"] = len(data["offers"])
    if limit is not None:
        data["offers"] = data["offers"][:limit]
    if json_:
        from corral.cli.output import print_json

        print_json(data)
        return
    _print(data)


def gpu_text(o: dict) -> str:
    return f"{o['gpu_type'] or 'GPU'} x{o['gpu_count']}" if o["gpu_count"] else "no GPU"


def _print(data: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from corral.cli.output import console

    for name, r in (data.get("refresh") or {}).items():
        if r["refreshed"]:
            console.print(f"[green]{name}: live prices reloaded[/] (as of {r['prices_as_of']})")
        else:
            console.print(f"[dim]{name}: prices not reloaded: {escape(r['reason'])}[/]")
    rows = data["offers"]
    if rows:
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("PROVIDER", "REGION", "MACHINE", "GPUS", "KIND", "$/H", "AVAILABLE", "PRICES"):
            t.add_column(col, justify="right" if col == "$/H" else "left")
        for o in rows:
            avail = o["availability"] if o["available"] else "none"
            style = "" if o["available"] else "dim"
            t.add_row(
                o["provider"],
                o["region"],
                escape(str(o["details"].get("machine") or o["offer_id"])),
                gpu_text(o),
                "spot" if o["spot"] else "on-demand",
                f"{o['price_per_hour']:.3f}",
                avail,
                o["catalog_date"] or "-",
                style=style,
            )
        console.print(t)
        if data["count"] > len(rows):
            console.print(f"[dim]({data['count'] - len(rows)} more; --limit to see them)[/]")
    else:
        console.print("no offer fits")
    silent = [p for p in data["providers"] if p["reason"]]
    if silent:
        console.print("\n[bold]providers without offers[/]")
        for p in silent:
            console.print(f"  {p['provider']}: {escape(p['reason'])}")
