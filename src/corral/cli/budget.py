"""``corral budget [set|rm]``: spending caps across runs, per user, project or team, per
calendar month or in all. With ``CORRAL_SERVER`` set, the team server's caps."""

from __future__ import annotations

from typing import Any

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Spending caps across runs: per user, per project (the spec's `project`) or for the "
    "whole team, per calendar month (UTC) or in all.",
    add_completion=False,
    invoke_without_command=True,
)


def _caps() -> list[dict[str, Any]]:
    from corral.remote import connect

    remote = connect()
    if remote is not None:
        with remote:
            return list(remote.caps()["caps"])
    from corral.service.caps import list_caps

    return list(list_caps().to_json()["caps"])


def _who(cap: dict[str, Any]) -> str:
    return "team" if cap["scope"] == "team" else f"{cap['scope']} {cap['subject']}"


def _scope(user: str | None, project: str | None, team: bool) -> tuple[str, str | None]:
    from corral.errors import BadInput

    given = [(s, v) for s, v in (("user", user), ("project", project)) if v] + (
        [("team", None)] if team else []
    )
    if len(given) != 1:
        raise BadInput("name exactly one of --user NAME, --project NAME or --team")
    return given[0]


@app.callback()
def show(
    ctx: typer.Context,
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show each cap: what it has spent this period, what is left, and the runs billing
    against it now. A launch that would pass a cap is refused; running runs are stopped
    (a checkpoint first, the most recently started first) when it is reached."""
    if ctx.invoked_subcommand is not None:
        return
    from corral.cli.output import console, print_json

    caps = _caps()
    if json_:
        print_json({"caps": caps})
        return
    if not caps:
        console.print(
            "no spending caps: set one with `corral budget set --team 500` (or --user NAME, "
            "--project NAME)"
        )
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("CAP", "PERIOD", "SPENT", "LIMIT", "LEFT", "USED", "LIVE RUNS", "WARN AT"):
        table.add_column(col)
    for cap in caps:
        used = float(cap["fraction"])
        style = "red" if used >= 1 else "yellow" if used >= cap["warn_at"] else ""
        table.add_row(
            _who(cap),
            str(cap["period_label"]),
            f"${cap['spent_usd']:.2f}",
            f"${cap['amount_usd']:.2f}",
            f"${cap['left_usd']:.2f}",
            f"[{style}]{used:.0%}[/]" if style else f"{used:.0%}",
            str(cap["live_runs"]),
            f"{cap['warn_at']:.0%}",
        )
    console.print(table)


@app.command("set")
def set_(
    amount: float = typer.Argument(..., metavar="USD", help="Dollars, e.g. 500."),
    user: str = typer.Option(None, "--user", help="A user: an API token's name, or a login."),
    project: str = typer.Option(None, "--project", help="A project: the spec's `project`."),
    team: bool = typer.Option(False, "--team", help="Every run."),
    period: str = typer.Option("month", "--period", help="month (calendar, UTC) or total."),
    warn_at: float = typer.Option(0.9, "--warn-at", help="Warn (event, webhook) at this share."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Create or replace a cap of USD dollars."""
    from corral.cli.output import console, print_json
    from corral.remote import connect

    scope, subject = _scope(user, project, team)
    remote = connect()
    if remote is not None:
        with remote:
            body = {"scope": scope, "amount_usd": amount, "warn_at": warn_at, "period": period}
            cap = remote.set_cap({**body, **({"subject": subject} if subject else {})})
    else:
        from corral.service.caps import launcher, set_cap

        cap = set_cap(
            scope, subject, amount, warn_at=warn_at, period=period, set_by=launcher()
        ).to_json()
    if json_:
        print_json(cap)
        return
    console.print(
        f"cap of {_who(cap)}: ${cap['amount_usd']:.2f} ({cap['period_label']}), "
        f"${cap['spent_usd']:.2f} spent, warning at {cap['warn_at']:.0%}"
    )


@app.command("rm")
def remove(
    user: str = typer.Option(None, "--user"),
    project: str = typer.Option(None, "--project"),
    team: bool = typer.Option(False, "--team"),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Remove a cap."""
    from corral.cli.output import console, print_json
    from corral.remote import connect

    scope, subject = _scope(user, project, team)
    remote = connect()
    if remote is not None:
        with remote:
            cap = remote.remove_cap(scope, subject)
    else:
        from corral.service.caps import remove_cap

        cap = remove_cap(scope, subject).to_json()
    if json_:
        print_json(cap)
    else:
        console.print(f"cap of {_who(cap)} removed")
