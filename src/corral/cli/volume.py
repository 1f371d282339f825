"""``corral volume ls|rm``: named persistent volumes (spec ``volumes:``) that outlive runs.

Runs never delete them; this is the only way (:mod:`corral.service.volumes`)."""

from __future__ import annotations

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Persistent volumes (spec `volumes:`): list and delete them.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Persistent volumes (spec `volumes:`) of the providers that offer them. corral
    creates one when a run names it and it is missing, and never deletes it with a run: delete
    it here when you no longer need it (it is billed while it exists)."""


@app.command("ls")
def ls(
    provider: list[str] = typer.Option(
        [], "--provider", help="Only this provider (repeatable). Default: the enabled ones."
    ),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the named volumes of the enabled providers, with where they live, their size and
    the machines using them."""
    from corral.cli.output import console, print_json
    from corral.service.volumes import list_volumes

    found = list_volumes(provider)
    if json_:
        print_json(found)
        return
    from rich.markup import escape
    from rich.table import Table

    if found.volumes:
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("NAME", "PROVIDER", "REGION", "SIZE", "STATE", "USED BY", "ID"):
            t.add_column(col, justify="right" if col == "SIZE" else "left")
        for v in found.volumes:
            t.add_row(
                escape(v.name),
                v.provider,
                v.region,
                f"{v.size_gb} GB",
                v.state,
                ", ".join(v.attached_to) or "-",
                v.volume_id,
            )
        console.print(t)
    else:
        console.print("no volumes")
    silent = [p for p in found.providers if p.reason]
    if silent:
        console.print("\n[bold]providers without volumes[/]")
        for p in silent:
            console.print(f"  {p.provider}: {escape(p.reason or '')}")


@app.command("rm")
def rm(
    name: str = typer.Argument(..., metavar="NAME", help="The volume's name."),
    provider: str = typer.Option(None, "--provider", help="The provider holding it."),
    region: str = typer.Option(None, "--region", help="Where it lives, if several share a name."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Delete volume NAME and its data (refused while a machine uses it). Asks first unless
    --yes (or --json, or stdin is not a terminal)."""
    import sys

    from corral.cli.output import console, print_json
    from corral.service.volumes import remove_volume

    if not (yes or json_) and sys.stdin is not None and sys.stdin.isatty():
        typer.confirm(f"Delete volume {name} and everything on it?", abort=True, err=True)
    done = remove_volume(name, provider=provider, region=region)
    if json_:
        print_json(done)
        return
    for v in done.removed:
        console.print(f"volume {v.name} deleted ({v.provider}, {v.region}, {v.volume_id})")
