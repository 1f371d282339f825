"""``corral token create|list|revoke``: API tokens for ``corral server``."""

from __future__ import annotations

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="API tokens for `corral server` (stored hashed; a token is shown once).",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """API tokens for `corral server`: every endpoint but /healthz needs one, sent as
    `Authorization: Bearer <token>`. Only a hash is stored; the token is shown once."""


@app.command("create")
def create(
    name: str = typer.Argument(..., metavar="NAME", help="e.g. laptop, dashboard, ci."),
    read_only: bool = typer.Option(
        False, "--read-only", help="It may read runs, logs and events, never change them."
    ),
    json_: bool = typer.Option(False, "--json", help="Print JSON (the token included)."),
) -> None:
    """Create token NAME and print it (once: it cannot be shown again)."""
    from corral.cli.output import err_console, print_json
    from corral.service.tokens import create_token

    created = create_token(name, read_only=read_only)
    if json_:
        print_json(created)
        return
    kind = "read-only " if read_only else ""
    err_console.print(f"{kind}token {name} created; it is shown this once:")
    typer.echo(created.token)


@app.command("list")
def list_(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Names, kinds and dates of the API tokens (never the tokens)."""
    from corral.cli.output import console, print_json
    from corral.service.tokens import list_tokens

    tokens = list_tokens()
    if json_:
        print_json([t.to_json() for t in tokens])
        return
    if not tokens:
        console.print("no API tokens: create one with `corral token create NAME`")
    for t in tokens:
        kind = "read-only" if t.read_only else "read-write"
        console.print(f"{t.name}\t{kind}\tcreated {t.created_at:%Y-%m-%d %H:%M} UTC")


@app.command("revoke")
def revoke(
    name: str = typer.Argument(..., metavar="NAME"),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Revoke token NAME: it is refused from now on."""
    from corral.cli.output import console, print_json
    from corral.service.tokens import revoke_token

    revoked = revoke_token(name)
    if json_:
        print_json(revoked)
    else:
        console.print(f"token {name} revoked")
