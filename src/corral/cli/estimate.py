"""``corral estimate FILE``: what a job would cost on each offer that fits it, on-demand and
spot side by side, before anything is launched, and each stage's part.

:func:`corral.service.estimate.estimate_cost` works it out (how: see there); this prints it,
marking each flagged cost with a letter explained under the table, and under it one line per
stage: its hours, where they come from, and their cost on the offer a launch would take.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


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
    resources.max_hourly_price are flagged. Then each stage's hours (from its
    expected_runtime, else its time in earlier runs of the same spec) and their cost."""
    from corral.service.estimate import estimate_cost

    found = estimate_cost(file, hours=hours, overrides=set_)
    if json_:
        from corral.cli.output import print_json

        print_json(found)
        return
    _print(found.to_json())
    from corral.cli.offers import warn_stale

    warn_stale(found.stale_prices)


#: one-letter marks after a cost, explained under the table: one per flag of a side
#: (:data:`corral.service.plan_views.CostFlag`; not imported here, to keep start-up light)
_MARKS = {
    "over_budget": ("b", "over budget.max_cost_usd"),
    "over_max_hourly_price": ("p", "over resources.max_hourly_price"),
    "excluded_by_resources_spot": ("x", "ruled out by resources.spot"),
    "unavailable": ("n", "no capacity now"),
}
#: flags printed in red: the offer is over a limit the user set
_OVER_LIMIT = frozenset({"over_budget", "over_max_hourly_price"})
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
    if _OVER_LIMIT.intersection(side["flags"]):
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
    elif data["launch"] == "refused":
        console.print("[red]a launch would be refused at once (exit 5): no provider can run it[/]")
    else:
        console.print("[yellow]no available offer is within every limit: a launch would wait[/]")
    for p in data["providers"]:
        if p["reason"]:
            console.print(f"  [dim]{p['provider']}: {escape(p['reason'])}[/]")
    _print_stages(data)


def _source(stage: dict[str, Any]) -> str:
    """Where a stage's hours come from, in words."""
    if stage["hours_from"] == "spec":
        return "spec (expected_runtime)"
    if stage["hours_from"] == "earlier_runs":
        runs = stage["runs"]
        return f"{runs} earlier run{'s' if runs != 1 else ''}"
    return "unknown"


def _print_stages(data: dict[str, Any]) -> None:
    """The stages' table: hours, their source, their cost on the offer a launch would take;
    then the longest chain of needs (what the machine runs for)."""
    from rich.markup import escape
    from rich.table import Table

    from corral.cli.output import console, fmt_cost

    stages = data.get("stages") or []
    if not stages:
        return
    t = Table(box=None, pad_edge=False, header_style="bold")
    t.add_column("STAGE")
    t.add_column("NEEDS")
    t.add_column("HOURS", justify="right")
    t.add_column("FROM")
    t.add_column("COST", justify="right")
    for s in stages:
        t.add_row(
            escape(s["name"]),
            escape(", ".join(s["needs"])) or "-",
            "-" if s["hours"] is None else f"{s['hours']:.2f}",
            _source(s),
            "-" if s["cost_usd"] is None else fmt_cost(s["cost_usd"]),
        )
    console.print()
    console.print(t)
    if data.get("stages_hours") is None:
        console.print("[dim]stages: some stage's hours are unknown (set expected_runtime)[/]")
        return
    cost = data.get("stages_cost_usd")
    total = f": {fmt_cost(cost)}" if cost is not None else ""
    console.print(f"stages, longest chain of needs: {data['stages_hours']:.2f} h{total}")
