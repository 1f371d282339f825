"""``corral gpus``: this machine's GPUs and which run holds each."""

from __future__ import annotations

from typing import Any

import typer


def gpus(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show the local GPU inventory (NVML, CUDA_VISIBLE_DEVICES or CORRAL_FAKE_GPUS) and the
    run holding each GPU."""
    from corral.cli.output import console, print_json
    from corral.providers.base import RunsOnThisMachine
    from corral.providers.registry import this_machine

    provider = this_machine()  # the provider whose machine is this one
    rows: list[dict[str, Any]] = (
        provider.gpu_holders() if isinstance(provider, RunsOnThisMachine) else []
    )
    if json_:
        print_json(rows)
        return
    if not rows:
        console.print(
            "no GPU on this machine (set CORRAL_FAKE_GPUS=L40S:8 to declare a fake inventory)"
        )
        return
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("GPU", "TYPE", "MEMORY", "HELD BY"):
        t.add_column(col)
    for r in rows:
        mem = r.get("memory_mb") or 0
        t.add_row(
            str(r.get("id")),
            str(r.get("name")),
            f"{mem / 1024:.0f} GiB" if mem else "-",
            r.get("run_id") or ("another corral home" if r.get("other_home") else "[green]free[/]"),
        )
    console.print(t)
