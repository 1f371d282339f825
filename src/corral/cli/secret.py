"""``corral secret set|list|rm|rotate``: the encrypted secret store (see docs/providers.md).

A value is read from a hidden prompt, or from stdin when stdin is not a terminal; it is never
a command-line argument (it would land in the shell history and in ``ps``) and never printed.
"""

from __future__ import annotations

import sys

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Secrets: encrypted values for jobs (spec `secrets:`), webhooks and providers.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Secrets: encrypted values for jobs (spec `secrets:`), webhooks and providers. Values
    are stored encrypted under CORRAL_HOME and never shown; a name not in the store is looked
    up in the environment."""


def _read_value(name: str) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        import click

        return click.prompt(
            f"Value of {name}",
            hide_input=True,
            confirmation_prompt=True,
            err=True,
            show_default=False,
        )
    raw = sys.stdin.read() if sys.stdin is not None else ""
    # one trailing newline is what `echo` and here-strings add, not part of the value
    if raw.endswith("\r\n"):
        return raw[:-2]
    return raw[:-1] if raw.endswith("\n") else raw


@app.command("set")
def set_(
    name: str = typer.Argument(..., metavar="NAME", help="Upper-case name, e.g. HF_TOKEN."),
    extra: list[str] = typer.Argument(None, hidden=True),
    json_: bool = typer.Option(False, "--json", help="Print the secret's name and dates."),
) -> None:
    """Save secret NAME, encrypted. The value comes from a hidden prompt, or from stdin when
    it is not a terminal (`corral secret set HF_TOKEN < token.txt`)."""
    from corral.cli.output import console, print_json
    from corral.errors import BadInput
    from corral.service.secrets import check_name, set_secret

    if extra:  # never echo it: it is probably the value
        raise BadInput(
            "the value is never a command-line argument (shell history, ps): "
            f"run `corral secret set {check_name(name)}` and type it, or pipe it to stdin"
        )
    check_name(name)  # before asking for the value
    info = set_secret(name, _read_value(name))
    if json_:
        print_json(info)
    else:
        console.print(f"secret {name} saved (encrypted)")


@app.command("list")
def list_(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Names and dates of the stored secrets (never their values)."""
    from corral.cli.output import ago, console, print_json
    from corral.service.secrets import list_secrets

    infos = list_secrets()
    if json_:
        print_json([i.to_json() for i in infos])
        return
    if not infos:
        console.print("no secrets stored (add one with `corral secret set NAME`)")
        return
    width = max(len("NAME"), *(len(i.name) for i in infos))
    console.print(f"{'NAME':<{width}}  {'CREATED':<11}  UPDATED")
    for i in infos:
        console.print(f"{i.name:<{width}}  {ago(i.created_at):<11}  {ago(i.updated_at)}")


@app.command("rm")
def rm(
    name: str = typer.Argument(..., metavar="NAME"),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Delete secret NAME from the store (exit 3 if there is none)."""
    from corral.cli.output import console, print_json
    from corral.service.secrets import delete_secret

    deleted = delete_secret(name)
    if json_:
        print_json(deleted)
    else:
        console.print(f"secret {name} deleted")


@app.command("rotate")
def rotate(
    drop_old: bool = typer.Option(
        False, "--drop-old", help="Remove the old keys from the key file once all is re-encrypted."
    ),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Re-encrypt every secret with a new key (the key file gets a new first key; older keys
    still decrypt unless --drop-old). With CORRAL_SECRET_KEY set, put the new key first in
    it (comma-separated) and run this to re-encrypt with it."""
    from corral.cli.output import console, print_json
    from corral.service.secrets import rotate_secrets

    done = rotate_secrets(drop_old=drop_old)
    if json_:
        print_json(done)
    else:
        count, keys = done.reencrypted, done.keys
        console.print(
            f"re-encrypted {count} secret{'s' if count != 1 else ''} with the new key "
            f"({keys} key{'s' if keys != 1 else ''} in {done.source})"
        )
