"""``corral sweep launch|status|stop|ls``: hyperparameter sweeps whose trials are corral runs,
under one budget, bad trials stopped early."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Hyperparameter sweeps: a job spec with a `sweep:` section; every trial is a run.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _here() -> None:
    """Hyperparameter sweeps: a job spec with a `sweep:` section; every trial is a run."""
    from corral.errors import BadInput
    from corral.remote import configured

    if configured():
        raise BadInput(
            "corral sweep runs with this machine's controller and store: unset CORRAL_SERVER "
            "(a team server shows its sweeps at /api/v1/sweeps and on its dashboard)"
        )


def _value(v: Any) -> str:
    return "-" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


def _print(view: Any) -> None:
    from rich.table import Table

    from corral.cli.output import console

    doc = view.to_json()
    budget = f" of ${doc['budget_usd']:.2f}" if doc["budget_usd"] else ""
    console.print(
        f"sweep [b]{doc['name']}[/b]: {doc['state']} ({doc['reason']}), {doc['search']}, "
        f"{len(doc['trials'])}/{doc['max_trials']} trials, ${doc['spent_usd']:.2f}{budget} spent"
    )
    if doc["best_trial"] is not None:
        console.print(
            f"best: trial {doc['best_trial']}, {doc['metric']} {_value(doc['best_value'])} "
            f"({doc['goal']}) with {doc['best_params']}"
        )
    if not doc["trials"]:
        return
    table = Table(box=None, pad_edge=False)
    paths = list(doc["trials"][0]["params"])
    for col in ("#", "STATE", *paths, doc["metric"].upper(), "STEP", "COST", "RUN"):
        table.add_column(col)
    for t in doc["trials"]:
        row = [
            str(t["number"]),
            t["state"],
            *(_value(t["params"].get(p)) for p in paths),
            _value(t["value"]),
            _value(t["step"]),
            f"${t['cost_usd']:.2f}",
            t["run_id"],
        ]
        table.add_row(*row, style="bold green" if t["best"] else None)
    console.print(table)


@app.command("launch")
def launch(
    file: Path = typer.Argument(..., help="A job spec with a `sweep:` section."),
    set_: list[str] = typer.Option([], "--set", help="Override a job spec key first."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Check the sweep and start it: the controller launches its trials."""
    from corral.cli.output import print_json
    from corral.service.sweeps import launch_sweep

    view = launch_sweep(file, overrides=set_)
    if json_:
        print_json(view)
    else:
        _print(view)


@app.command("status")
def status(
    name: str = typer.Argument(..., metavar="NAME"),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The leaderboard: every trial's parameters, metric, state and cost; the best first."""
    from corral.cli.output import print_json
    from corral.service.sweeps import sweep_status

    view = sweep_status(name)
    if json_:
        print_json(view)
    else:
        _print(view)


@app.command("stop")
def stop(
    name: str = typer.Argument(..., metavar="NAME"),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Start no new trial and stop the running ones gracefully (a checkpoint first)."""
    from corral.cli.output import console, print_json
    from corral.service.sweeps import stop_sweep

    view = stop_sweep(name)
    if json_:
        print_json(view)
    else:
        console.print(f"sweep {name}: stopping ({len(view.trials)} trials so far)")


@app.command("ls")
def ls(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every sweep, newest first."""
    from corral.cli.output import console, print_json
    from corral.service.sweeps import list_sweeps

    found = list_sweeps()
    if json_:
        print_json(found)
        return
    if not found.sweeps:
        console.print("no sweeps: start one with `corral sweep launch FILE`")
    for s in found.sweeps:
        best = "-" if s.best_value is None else f"{s.best_value:.6g}"
        console.print(
            f"{s.name}\t{s.state}\t{len(s.trials)}/{s.max_trials} trials\t"
            f"best {s.metric} {best}\t${s.spent_usd:.2f}"
        )
