"""``corral offers``: what the enabled providers would rent out for a GPU request, cheapest
first, unavailable offers last; providers that gave nothing are listed with their reason
(:func:`corral.service.offers.list_offers` finds them; this prints them)."""

from __future__ import annotations

from typing import Any

import typer


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
    nodes: int = typer.Option(
        1,
        "--nodes",
        help="Machines for one job (a multi-node gang): providers that cannot give that many "
        "are listed with why.",
    ),
    limit: int = typer.Option(None, "--limit", "-n", help="Show at most this many offers."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List offers of the enabled providers, cheapest first ($/h for the whole machine),
    unavailable ones last, with availability, region, GPUs, spot or on-demand, and where each
    price came from and when (a live API and the time it was read, or a catalog and its
    date)."""
    from corral.errors import BadInput
    from corral.service.offers import list_offers

    if spot and on_demand:
        raise BadInput("--spot and --on-demand exclude each other (give neither for both kinds)")
    found = list_offers(
        gpus=gpus,
        spot=True if spot else (False if on_demand else None),
        regions=region,
        providers=provider,
        max_price=max_price,
        refresh=refresh,
        limit=limit,
        nodes=nodes,
    )
    if json_:
        from corral.cli.output import print_json

        print_json(found)
        return
    _print(found.to_json())
    warn_stale(found.stale_prices)


def warn_stale(stale: list | None) -> None:
    """One warning line per provider whose price catalog is too old (on stderr)."""
    from rich.markup import escape

    from corral.cli.output import err_console

    for s in stale or []:
        err_console.print(f"[yellow]warning: {escape(s.message)}[/]")


def gpu_text(o: dict) -> str:
    return f"{o['gpu_type'] or 'GPU'} x{o['gpu_count']}" if o["gpu_count"] else "no GPU"


def _print(data: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from corral.cli.output import console, print_whole

    for name, r in (data.get("refresh") or {}).items():
        if r["refreshed"]:
            console.print(f"[green]{name}: live prices reloaded[/] (as of {r['prices_as_of']})")
        else:
            console.print(f"[dim]{name}: prices not reloaded: {escape(r['reason'])}[/]")
    rows = data["offers"]
    if rows:
        t = Table(box=None, pad_edge=False, header_style="bold")
        cols = (
            "PROVIDER",
            "REGION",
            "MACHINE",
            "GPUS",
            "KIND",
            "$/H",
            "AVAILABLE",
            "PRICES",
            "SOURCE",
        )
        for col in cols:
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
                escape(str(o["details"].get("price_source") or "-")),
                style=style,
            )
        print_whole(t)  # never a price or a date cut short
        if data["count"] > len(rows):
            console.print(f"[dim]({data['count'] - len(rows)} more; --limit to see them)[/]")
    else:
        console.print("no offer fits")
    silent = [p for p in data["providers"] if p["reason"]]
    if silent:
        console.print("\n[bold]providers without offers[/]")
        for p in silent:
            console.print(f"  {p['provider']}: {escape(p['reason'])}")
